-- Acquire or re-enter a fenced lock (Redisson's RFencedLock): a reentrant
-- lock whose every successful acquisition, reentry included, takes the next
-- fencing token.
-- KEYS[1]  the lock: a hash of holder id -> hold count
-- KEYS[2]  the token counter, redisson_lock_token:{name} (never expires)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id, <client uuid>:<thread number>
-- Returns  {-1, token} when acquired; the token is read back with GET so it
--          stays exact beyond 2^53 (Lua numbers are doubles);
--          {-2, counter} without taking it when the counter is not
--          positive after INCR (it was set to a negative value);
--          otherwise {PTTL, -1} (PTTL -1 = no expiry).
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_ms(ARGV[1], 'lease')
if bad then
    return bad
end
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    -- The counter first: a script error does not roll back what ran before
    -- it, and a failed INCR (a non-integer counter) must not leave a hold.
    if redis.call('incr', KEYS[2]) < 1 then
        -- Not a token (the counter was set below zero): take no hold.
        return {-2, redis.call('get', KEYS[2])}
    end
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {-1, redis.call('get', KEYS[2])}
end
return {redis.call('pttl', KEYS[1]), -1}
