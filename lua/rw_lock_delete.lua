-- Delete a read-write lock whatever its mode (Redisson's
-- RReadWriteLock.delete), with its holders' read-hold timeout keys, and
-- wake every waiter (the read-unlock message): they retry at once instead
-- of sleeping out the deleted holds' TTL. Redisson deletes the hash alone
-- and publishes nothing; the timeout keys it leaves expire on their own.
-- KEYS[1]  the lock hash
-- KEYS[2]  the channel, redisson_rwlock:{name}
-- KEYS[3]  the key prefix of every holder's timeout keys, {name}
-- ARGV[1]  the read-unlock message (1)
-- Returns  1 when the lock existed (and the message was published); 0 otherwise.
if redis.call('exists', KEYS[1]) == 0 then
    return 0
end
-- A hold count is at most what a thread can nest; a count beyond this cap
-- is not a real one, and keys past it expire on their own anyway.
local max_holds = 10000
local fields = redis.call('hkeys', KEYS[1])
for _, field in ipairs(fields) do
    if field ~= 'mode' then
        local holds = tonumber(redis.call('hget', KEYS[1], field))
        if type(holds) == 'number' then
            for i = math.min(holds, max_holds), 1, -1 do
                redis.call('del', KEYS[3] .. ':' .. field .. ':rwlock_timeout:' .. i)
            end
        end
    end
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
