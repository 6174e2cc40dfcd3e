-- Count a count-down latch down by one (Redisson's RCountDownLatch).
-- KEYS[1]  the latch: a string holding the count
-- KEYS[2]  its channel, redisson_countdownlatch__channel__{name}
-- ARGV[1]  the zero message (0: opens the latch, wakes every waiter)
-- Returns  the new count. At zero or below the key is deleted; the message
--          is published only when the count reaches exactly zero.
local value = redis.call('decr', KEYS[1])
if value <= 0 then
    redis.call('del', KEYS[1])
end
if value == 0 then
    redis.call('publish', KEYS[2], ARGV[1])
end
return value
