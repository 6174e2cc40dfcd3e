-- Set a counter (a semaphore's permits, a latch's count) only if it is not
-- set yet, and announce it.
-- KEYS[1]  the counter: a string holding an integer
-- KEYS[2]  its channel (redisson_sc:{name}, or redisson_countdownlatch__channel__{name})
-- ARGV[1]  the value
-- ARGV[2]  the message to publish (semaphore: the permit count; latch: 1, "new count")
-- Returns  1 when set; 0 when it already existed.
-- Checked before any write (a script error does not undo earlier writes).
local _, bad_count = count_checks()
local bad = bad_count(ARGV[1], 'value')
if bad then
    return bad
end
if redis.call('get', KEYS[1]) == false then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call('publish', KEYS[2], ARGV[2])
    return 1
end
return 0
