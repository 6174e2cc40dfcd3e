-- Add permits to a semaphore (release, add_permits); the delta may be
-- negative (add_permits only), and the count may go negative.
-- KEYS[1]  the semaphore: a string holding the available permits (absent = 0)
-- KEYS[2]  its channel, redisson_sc:{name}
-- KEYS[3]  optional (redisync only): this call's record,
--          {name}:redisync_op:<op id>. A call whose record is there does
--          not count again: it is the same request sent again (its reply
--          lost, or its outcome unknown), and replies with the count as it
--          is now.
-- ARGV[1]  the delta
-- ARGV[2]  with KEYS[3]: how long the record is kept, ms
-- Returns  the new count; when the delta is positive the new count is
--          published, which wakes up to that many waiters.
-- Checked before any write (a script error does not undo earlier writes).
local _, bad_count = count_checks()
local bad = bad_count(ARGV[1], 'delta')
    or (KEYS[3] and bad_bounded(ARGV[2], 'record', 1, MAX_MS))
if bad then
    return bad
end
-- The record first, only if absent: one call on the common path.
if KEYS[3] and not redis.call('set', KEYS[3], 1, 'px', ARGV[2], 'nx') then
    local now = redis.call('get', KEYS[1])
    return tonumber(now) or 0
end
local value = redis.pcall('incrby', KEYS[1], ARGV[1])
if type(value) == 'table' then
    -- Not counted (not an integer, overflow, another type): nor recorded.
    if KEYS[3] then
        redis.call('del', KEYS[3])
    end
    return value
end
if tonumber(ARGV[1]) > 0 then
    redis.call('publish', KEYS[2], value)
end
return value
