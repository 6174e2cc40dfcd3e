-- Take permits from a semaphore if enough are available.
-- KEYS[1]  the semaphore
-- ARGV[1]  how many permits (positive)
-- Returns  1 when taken; 0 when fewer are available.
-- Checked before any write (a script error does not undo earlier writes).
local bad_integer, _, integer_below = count_checks()
local bad = bad_integer(ARGV[1], 'permits', '1', '9223372036854775807')
if bad then
    return bad
end
local value = redis.call('get', KEYS[1])
if value ~= false and not string.match(value, '^-?%d+$') then
    return redis.error_reply('ERR value is not an integer or out of range')
end
-- Compared as digit strings: tonumber would round counts beyond 2^53 and
-- could take more permits than there are.
if value ~= false and not integer_below(value, ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    return 1
end
return 0
