-- Take every available permit.
-- Loaded after args_prelude.lua and op_record_prelude.lua.
-- KEYS[1]  the semaphore
-- KEYS[2]  optional (redisync only): this call's record,
--          {name}:redisync_op:<op id> (see op_record_prelude.lua): a copy
--          of a call that already acted returns its first outcome and
--          writes nothing; one settled as not done replies
--          `ERR late request` and writes nothing.
-- ARGV[1]  with the record: how long it is kept, ms
-- Returns  how many were available, as stored (a decimal string; nil when
--          absent = 0); the count becomes 0. A non-integer value is an error
--          and is left as it is.
local replay = op_replay(0)
if replay ~= nil then
    return replay
end
local value = redis.call('get', KEYS[1])
if value == false then
    return op_keep(nil)
end
if not string.match(value, '^-?%d+$') then
    return redis.error_reply('ERR value is not an integer or out of range')
end
redis.call('set', KEYS[1], 0)
return op_keep(value)
