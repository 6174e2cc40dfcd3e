-- Set a counter (a semaphore's permits, a latch's count) only if it is not
-- set yet, and announce it.
-- Loaded after args_prelude.lua and op_record_prelude.lua.
-- KEYS[1]  the counter: a string holding an integer
-- KEYS[2]  its channel (redisson_sc:{name}, or redisson_countdownlatch__channel__{name})
-- KEYS[3]  optional (redisync only): this call's record,
--          {name}:redisync_op:<op id> (see op_record_prelude.lua): a copy
--          of a call that already acted returns its first outcome and
--          writes nothing; one settled as not done replies
--          `ERR late request` and writes nothing.
-- ARGV[1]  the value
-- ARGV[2]  the message to publish (semaphore: the permit count; latch: 1, "new count")
-- ARGV[3]  with the record: how long it is kept, ms
-- Returns  1 when set; 0 when it already existed.
-- Checked before any write (a script error does not undo earlier writes).
local _, bad_count = count_checks()
local bad = bad_count(ARGV[1], 'value')
if bad then
    return bad
end
local replay = op_replay(2)
if replay ~= nil then
    return replay
end
if redis.call('get', KEYS[1]) == false then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call('publish', KEYS[2], ARGV[2])
    return op_keep(1)
end
return op_keep(0)
