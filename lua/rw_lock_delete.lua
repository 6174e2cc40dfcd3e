-- Delete a read-write lock whatever its mode (Redisson's
-- RReadWriteLock.delete), with its holders' read-hold timeout keys, and
-- wake every waiter (the read-unlock message): they retry at once instead
-- of sleeping out the deleted holds' TTL. Redisson deletes the hash alone
-- and publishes nothing; the timeout keys it leaves expire on their own.
-- Loaded after args_prelude.lua and op_record_prelude.lua.
-- KEYS[1]  the lock hash
-- KEYS[2]  the channel, redisson_rwlock:{name}
-- KEYS[3]  the key prefix of every holder's timeout keys, {name}
-- KEYS[4]  optional (redisync only): this call's record,
--          {name}:redisync_op:<op id> (see op_record_prelude.lua): a copy
--          of a call that already acted returns its first outcome and
--          writes nothing; one settled as not done replies
--          `ERR late request` and writes nothing.
-- ARGV[1]  the read-unlock message (1)
-- ARGV[2]  with the record: how long it is kept, ms
-- Returns  1 when the lock existed (and the message was published); 0 otherwise.
local replay = op_replay(1)
if replay ~= nil then
    return replay
end
if redis.call('exists', KEYS[1]) == 0 then
    return op_keep(0)
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
return op_keep(1)
