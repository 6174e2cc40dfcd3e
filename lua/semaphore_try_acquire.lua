-- Take permits from a semaphore if enough are available.
-- KEYS[1]  the semaphore
-- KEYS[2]  optional (redisync only): this call's record,
--          {name}:redisync_op:<op id>: 1 = it took the permits, 0 = it
--          found too few, u = it was undone (lua/semaphore_undo_acquire.lua).
--          A call whose record is there does not act again: the request
--          sent again (its reply lost, or a copy delayed in the network)
--          replies with the first outcome; u = refused as a late request.
-- ARGV[1]  how many permits (positive)
-- ARGV[2]  with KEYS[2]: how long the record is kept, ms
-- Returns  1 when taken; 0 when fewer are available.
-- Checked before any write (a script error does not undo earlier writes).
local bad_integer, _, integer_below = count_checks()
local bad = bad_integer(ARGV[1], 'permits', '1', '9223372036854775807')
    or (KEYS[2] and bad_bounded(ARGV[2], 'record', 1, MAX_MS))
if bad then
    return bad
end
local value = redis.call('get', KEYS[1])
if value ~= false and not string.match(value, '^-?%d+$') then
    return redis.error_reply('ERR value is not an integer or out of range')
end
-- Compared as digit strings: tonumber would round counts beyond 2^53 and
-- could take more permits than there are.
local enough = value ~= false and not integer_below(value, ARGV[1])
-- The record first, only if absent: one call on every path. (The count is
-- an integer at least the permits: DECRBY below cannot fail.)
if KEYS[2] and not redis.call('set', KEYS[2], enough and 1 or 0, 'px', ARGV[2], 'nx') then
    local first = redis.call('get', KEYS[2])
    if first == '1' then
        return 1
    elseif first == '0' then
        return 0
    end
    return redis.error_reply('ERR late request: this acquire was undone already')
end
if enough then
    redis.call('decrby', KEYS[1], ARGV[1])
    return 1
end
return 0
