-- Take permits from a semaphore if enough are available.
-- KEYS[1]  the semaphore
-- ARGV[1]  how many permits (positive)
-- Returns  1 when taken; 0 when fewer are available.
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    return 1
end
return 0
