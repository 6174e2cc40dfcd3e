-- Add permits to a semaphore (release, add_permits); the delta may be
-- negative (add_permits only), and the count may go negative.
-- KEYS[1]  the semaphore: a string holding the available permits (absent = 0)
-- KEYS[2]  its channel, redisson_sc:{name}
-- ARGV[1]  the delta
-- Returns  the new count; when the delta is positive the new count is
--          published, which wakes up to that many waiters.
-- Checked before any write (a script error does not undo earlier writes).
local _, bad_count = count_checks()
local bad = bad_count(ARGV[1], 'delta')
if bad then
    return bad
end
local value = redis.call('incrby', KEYS[1], ARGV[1])
if tonumber(ARGV[1]) > 0 then
    redis.call('publish', KEYS[2], value)
end
return value
