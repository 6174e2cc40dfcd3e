-- Acquire or re-enter a fenced lock (Redisson's RFencedLock): a reentrant
-- lock whose every successful acquisition, reentry included, takes the next
-- fencing token.
-- KEYS[1]  the lock: a hash of holder id -> hold count
-- KEYS[2]  the token counter, redisson_lock_token:{name} (never expires)
-- KEYS[3]  optional (redisync only): this attempt's record,
--          {name}:redisync_attempt:<attempt id>, a string with the lease
--          (or ARGV[3]) as TTL: 'taken:<token>', the token this attempt took with its hold;
--          'undone' (lua/lock_undo_acquire.lua); or, once its hold was
--          released, the release's outcome (lua/lock_release.lua keeps it as
--          the unlock latch). An attempt whose record is there does not act
--          again: 'taken:<token>' (the request resent) = acquired with that
--          token, no second hold and no new token; anything else = refused
--          as a late request.
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id, <client uuid>:<thread number>
-- ARGV[3]  optional (redisync only, with KEYS[3]): how long the record is
--          kept, in ms, when longer than the lease: until every copy of
--          this request is past its window
-- Returns  {-1, token} when acquired; the token is read back with GET so it
--          stays exact beyond 2^53 (Lua numbers are doubles);
--          otherwise {PTTL, -1} (PTTL -1 = no expiry).
--
-- The token is INCR of the counter, as in Redisson, raised when needed to
-- at least the server's clock in microseconds since the epoch. So tokens
-- keep increasing when the counter is lost (a restart without persistence,
-- a failover to a replica that missed the last INCR) as long as the server
-- that answers after the loss has a clock later than the old one's when it
-- issued the last token. A counter set below the clock (even negative) is
-- raised the same way.

-- Redis before 5 replicates scripts verbatim unless told to replicate their
-- effects, and then refuses a write after TIME; from Redis 5 effects are
-- the default and from 7 the call is a no-op. It must come before any write.
if redis.replicate_commands ~= nil then
    redis.replicate_commands()
end
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
    or (ARGV[3] and bad_bounded(ARGV[3], 'record keep time', 1, MAX_MS))
if bad then
    return bad
end
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    if KEYS[3] then
        local record = redis.call('get', KEYS[3])
        if record then
            if string.sub(record, 1, 6) == 'taken:' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
                return {-1, string.sub(record, 7)}
            end
            if record == 'busy' then
                -- Another copy of this attempt was told busy: spent.
                return {math.max(redis.call('pttl', KEYS[1]), 1), -1}
            end
            return redis.error_reply('ERR late request: this acquire attempt was undone or released already')
        end
    end
    -- The counter first: a failed INCR (a non-integer counter, or one at the
    -- 64-bit limit) must fail before the hold is taken.
    local token = redis.call('incr', KEYS[2])
    -- The clock floor in µs: about 1.8e15, below 2^53, so the Lua double
    -- is exact; formatted as digits (never 1.8e+15) by string.format.
    local time = redis.call('time')
    local floor = tonumber(time[1]) * 1000000 + tonumber(time[2])
    if token < floor then
        -- SET, not INCRBY of the difference: exact even when the counter
        -- was far below zero (the difference would then pass 2^53).
        redis.call('set', KEYS[2], string.format('%.0f', floor))
    end
    local taken = redis.call('get', KEYS[2])
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if KEYS[3] then
        redis.call('set', KEYS[3], 'taken:' .. taken, 'px', ARGV[3] or ARGV[1])
    end
    return {-1, taken}
end
-- A busy attempt is spent: a copy of it landing later must not take the
-- lock for a caller told it was busy.
if KEYS[3] then
    redis.call('set', KEYS[3], 'busy', 'px', ARGV[3] or ARGV[1], 'nx')
end
return {redis.call('pttl', KEYS[1]), -1}
