-- Delete a count-down latch (so its count can be set again).
-- Loaded after args_prelude.lua and op_record_prelude.lua.
-- KEYS[1]  the latch
-- KEYS[2]  its channel
-- KEYS[3]  optional (redisync only): this call's record,
--          {name}:redisync_op:<op id> (see op_record_prelude.lua): a copy
--          of a call that already acted returns its first outcome and
--          writes nothing; one settled as not done replies
--          `ERR late request` and writes nothing.
-- ARGV[1]  the new-count message (1)
-- ARGV[2]  with the record: how long it is kept, ms
-- Returns  1 when it existed (and the message was published); 0 otherwise.
local replay = op_replay(1)
if replay ~= nil then
    return replay
end
if redis.call('del', KEYS[1]) == 1 then
    redis.call('publish', KEYS[2], ARGV[1])
    return op_keep(1)
end
return op_keep(0)
