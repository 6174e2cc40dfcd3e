-- Read a counter (a semaphore's permits, a latch's count).
-- KEYS[1]  the counter
-- Returns  its value as stored (a decimal string: exact beyond 2^53, where a
--          Lua number would not be); nil when absent (= 0).
return redis.call('get', KEYS[1])
