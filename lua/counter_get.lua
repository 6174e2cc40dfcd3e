-- Read a counter (a semaphore's permits, a latch's count).
-- KEYS[1]  the counter
-- Returns  its value; 0 when absent.
return tonumber(redis.call('get', KEYS[1]) or '0')
