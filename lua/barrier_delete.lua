-- Delete a barrier (redisync only) that no arrival waits at: its
-- generation count starts again at 0. Arrival records are left to expire.
-- KEYS[1]  the barrier (see lua/barrier_arrive.lua)
-- Returns  1 when deleted; 0 when absent, or when arrivals wait (then
--          nothing is changed: they keep waiting for their parties).
local arrived = redis.call('hget', KEYS[1], 'arrived')
if arrived and arrived ~= '0' then
    return 0
end
return redis.call('del', KEYS[1])
