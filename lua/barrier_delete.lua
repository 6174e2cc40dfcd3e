-- Delete a barrier (redisync only) that no arrival waits at: its
-- generation count starts again at 0. Arrival records are left to expire.
-- Loaded after args_prelude.lua and op_record_prelude.lua.
-- KEYS[1]  the barrier (see lua/barrier_arrive.lua)
-- KEYS[2]  optional (redisync only): this call's record,
--          {name}:redisync_op:<op id> (see op_record_prelude.lua): a copy
--          of a call that already acted returns its first outcome and
--          writes nothing; one settled as not done replies
--          `ERR late request` and writes nothing.
-- ARGV[1]  with the record: how long it is kept, ms
-- Returns  1 when deleted; 0 when absent, or when arrivals wait (then
--          nothing is changed: they keep waiting for their parties).
local replay = op_replay(0)
if replay ~= nil then
    return replay
end
local arrived = redis.call('hget', KEYS[1], 'arrived')
if arrived and arrived ~= '0' then
    return op_keep(0)
end
return op_keep(redis.call('del', KEYS[1]))
