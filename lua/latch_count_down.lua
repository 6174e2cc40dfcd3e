-- Count a count-down latch down by one (Redisson's RCountDownLatch).
-- KEYS[1]  the latch: a string holding the count
-- KEYS[2]  its channel, redisson_countdownlatch__channel__{name}
-- KEYS[3]  optional (redisync only): this call's record,
--          {name}:redisync_op:<op id>. A call whose record is there does
--          not count again (the same request sent again, its reply lost):
--          it replies with the count as it is now.
-- ARGV[1]  the zero message (0: opens the latch, wakes every waiter)
-- ARGV[2]  with KEYS[3]: how long the record is kept, ms
-- Returns  the new count. At zero or below the key is deleted; the message
--          is published only when the count reaches exactly zero.
if KEYS[3] then
    local bad = bad_bounded(ARGV[2], 'record', 1, MAX_MS)
    if bad then
        return bad
    end
    -- The record first, only if absent: one call on the common path.
    if not redis.call('set', KEYS[3], 1, 'px', ARGV[2], 'nx') then
        local now = redis.call('get', KEYS[1])
        return tonumber(now) or 0
    end
end
local value = redis.pcall('decr', KEYS[1])
if type(value) == 'table' then
    -- Not counted (not an integer, another type): nor recorded.
    if KEYS[3] then
        redis.call('del', KEYS[3])
    end
    return value
end
if value <= 0 then
    redis.call('del', KEYS[1])
end
if value == 0 then
    redis.call('publish', KEYS[2], ARGV[1])
end
return value
