-- Acquire or re-enter a reentrant lock (Redisson's RLock).
-- KEYS[1]  the lock: a hash of holder id -> hold count
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id, <client uuid>:<thread number>
-- Returns  nil when acquired (hold count + 1, TTL reset to the lease);
--          otherwise the lock's remaining TTL in ms (PTTL; -1 = no expiry).
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
if bad then
    return bad
end
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
