-- Delete a read-write lock held in the given mode and wake its waiters.
-- Loaded after args_prelude.lua and op_record_prelude.lua.
-- KEYS[1]  the lock hash
-- KEYS[2]  the channel, redisson_rwlock:{name}
-- KEYS[3]  optional (redisync only): this call's record,
--          {name}:redisync_op:<op id> (see op_record_prelude.lua): a copy
--          of a call that already acted returns its first outcome and
--          writes nothing; one settled as not done replies
--          `ERR late request` and writes nothing.
-- ARGV[1]  the mode this half forces: read or write
-- ARGV[2]  the message: 0 for read (unlock), 1 for write (read-unlock)
-- ARGV[3]  with the record: how long it is kept, ms
-- Returns  1 when the lock was held in that mode and is now deleted; 0 otherwise.
local replay = op_replay(2)
if replay ~= nil then
    return replay
end
if redis.call('hget', KEYS[1], 'mode') == ARGV[1] then
    redis.call('del', KEYS[1])
    redis.call('publish', KEYS[2], ARGV[2])
    return op_keep(1)
end
return op_keep(0)
