-- Delete a lock whoever holds it and wake its waiters.
-- Loaded after args_prelude.lua and op_record_prelude.lua.
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel
-- KEYS[3]  optional (redisync only): this call's record,
--          {name}:redisync_op:<op id> (see op_record_prelude.lua): a copy
--          of a call that already acted returns its first outcome and
--          writes nothing; one settled as not done replies
--          `ERR late request` and writes nothing.
-- ARGV[1]  the unlock message (0)
-- ARGV[2]  with the record: how long it is kept, ms
-- Returns  1 when the lock existed (and the message was published); 0 otherwise.
local replay = op_replay(1)
if replay ~= nil then
    return replay
end
if redis.call('del', KEYS[1]) == 1 then
    redis.call('publish', KEYS[2], ARGV[1])
    return op_keep(1)
end
return op_keep(0)
