-- Acquire or re-enter the write half of a read-write lock.
-- KEYS[1]  the lock hash (see read_lock_acquire.lua)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  the holder's write field, <client uuid>:<thread number>:write
-- ARGV[3]  the holder's read field, <client uuid>:<thread number>
-- Returns  nil when acquired (re-entry adds the lease to the remaining TTL, as
--          Redisson does); -3 when the caller holds the read half (read -> write
--          cannot be granted: waiting would wait for itself); otherwise the PTTL.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + tonumber(ARGV[1]))
    return nil
end
if mode == 'read' and redis.call('hexists', KEYS[1], ARGV[3]) == 1 then
    return -3
end
return redis.call('pttl', KEYS[1])
