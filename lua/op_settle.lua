-- Settle a recorded call (see op_record_prelude.lua) whose outcome the
-- client does not know (its round trip failed: a dropped connection, a
-- timeout): if it has not acted yet, mark it so that no copy of it ever
-- will; if it has, say what it returned.
-- KEYS[1]  the call's record, {name}:redisync_op:<op id>
-- ARGV[1]  how long the record is kept, ms (outliving every copy's window)
-- Returns  the record: 'u' when the call did not act (and now never will);
--          otherwise its outcome as the call stored it ('i<integer>',
--          's<string>', 'n' for nil; a counting call's record, '1').
local bad = bad_bounded(ARGV[1], 'record', 1, MAX_MS)
if bad then
    return bad
end
local record = redis.call('get', KEYS[1])
if record then
    return record
end
redis.call('set', KEYS[1], 'u', 'px', ARGV[1])
return 'u'
