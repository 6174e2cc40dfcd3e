-- Take every available permit.
-- KEYS[1]  the semaphore
-- Returns  how many were available (0 when absent); the count becomes 0.
local value = redis.call('get', KEYS[1])
if value == false then
    return 0
end
redis.call('set', KEYS[1], 0)
return tonumber(value)
