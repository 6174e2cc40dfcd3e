-- Take every available permit.
-- KEYS[1]  the semaphore
-- Returns  how many were available, as stored (a decimal string; nil when
--          absent = 0); the count becomes 0. A non-integer value is an error
--          and is left as it is.
local value = redis.call('get', KEYS[1])
if value == false then
    return nil
end
if not string.match(value, '^-?%d+$') then
    return redis.error_reply('ERR value is not an integer or out of range')
end
redis.call('set', KEYS[1], 0)
return value
