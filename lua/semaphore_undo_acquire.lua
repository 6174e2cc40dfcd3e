-- Undo exactly one acquire call of a semaphore whose outcome is unknown
-- (its request left, no reply came), and nothing else.
-- KEYS[1]  the semaphore
-- KEYS[2]  its channel, redisson_sc:{name}
-- KEYS[3]  the call's record, {name}:redisync_op:<op id> (see
--          lua/semaphore_try_acquire.lua)
-- ARGV[1]  the permits the call asked for (positive)
-- ARGV[2]  how long the record (now u, undone) is kept, ms: the call, if
--          it arrives later still, is refused
-- ARGV[3]  optional: 1 = forget the record instead (the same call is sent
--          again at once: a replica-acknowledgement retry)
-- Returns  1 when the call had taken its permits: they are given back and
--          the new count published; 0 when it had not (and now never
--          will). Idempotent: a repeat finds the record undone.
-- Checked before any write (a script error does not undo earlier writes).
local bad_integer = count_checks()
local bad = bad_integer(ARGV[1], 'permits', '1', '9223372036854775807')
    or bad_bounded(ARGV[2], 'record', 1, MAX_MS)
if bad then
    return bad
end
local first = take_record(KEYS[3], 'u', ARGV[2], ARGV[3])
if first ~= '1' then
    return 0
end
local value = redis.call('incrby', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], value)
return 1
