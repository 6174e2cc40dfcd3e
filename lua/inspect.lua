-- Read everything stored under one object's name, writing nothing
-- (Client::inspect). Every key read is tested with TYPE first, so another
-- type under any of them is reported, never a WRONGTYPE error.
-- KEYS[1]  the object: name
-- KEYS[2]  a fair lock's queue, redisson_lock_queue:{name}
-- KEYS[3]  a fair lock's slot deadlines, redisson_lock_timeout:{name}
-- KEYS[4]  a fenced lock's token counter, redisson_lock_token:{name}
-- KEYS[5]  a permit-expirable semaphore's leases, {name}:timeout
-- KEYS[6]  the prefix of a read-write lock's read-hold keys, {name}
-- Returns  {type of KEYS[1] (none, string, hash, list, ...), its PTTL,
--           contents, queue, slot deadlines, token, leases}:
--   contents       hash: {field, value, the longest PTTL of the field's
--                  read-hold keys (-3: none or not a read holder), ...};
--                  string: {value} ({false} when longer than 64 bytes);
--                  anything else: {}
--   queue          the waiter ids ({} unless KEYS[2] is a list)
--   slot deadlines {waiter id, deadline, ...} ({} unless KEYS[3] is a zset)
--   token          the counter as stored (false unless KEYS[4] is a string
--                  of at most 64 bytes)
--   leases         {permit id, lease end, ...} ({} unless KEYS[5] is a zset)
local function type_of(key)
    return redis.call('type', key)['ok']
end

-- A string's value when it is short enough to be a number; false otherwise.
local function short_string(key)
    local value = redis.call('get', key)
    if value and #value <= 64 then
        return value
    end
    return false
end

-- Read holds of one field checked at most: the newest ones (a real holder
-- has few; a foreign hash must not make this loop for long).
local MAX_READ_HOLDS = 1000

local kind = type_of(KEYS[1])
local contents = {}
if kind == 'hash' then
    local rw = redis.call('hexists', KEYS[1], 'mode') == 1
    local fields = redis.call('hkeys', KEYS[1])
    for _, field in ipairs(fields) do
        local value = redis.call('hget', KEYS[1], field)
        local longest = -3
        local holds = tonumber(value)
        if rw and field ~= 'mode' and string.sub(field, -6) ~= ':write'
            and holds and holds >= 1 and holds < 1e15 then
            holds = math.floor(holds)
            for i = holds, math.max(1, holds - MAX_READ_HOLDS + 1), -1 do
                local ttl = redis.call('pttl', KEYS[6] .. ':' .. field .. ':rwlock_timeout:' .. i)
                longest = math.max(ttl, longest)
            end
        end
        contents[#contents + 1] = field
        contents[#contents + 1] = value
        contents[#contents + 1] = longest
    end
elseif kind == 'string' then
    contents[1] = short_string(KEYS[1])
end

local queue = {}
if type_of(KEYS[2]) == 'list' then
    queue = redis.call('lrange', KEYS[2], 0, -1)
end
local deadlines = {}
if type_of(KEYS[3]) == 'zset' then
    deadlines = redis.call('zrange', KEYS[3], 0, -1, 'WITHSCORES')
end
local token = false
if type_of(KEYS[4]) == 'string' then
    token = short_string(KEYS[4])
end
local leases = {}
if type_of(KEYS[5]) == 'zset' then
    leases = redis.call('zrange', KEYS[5], 0, -1, 'WITHSCORES')
end
return {kind, redis.call('pttl', KEYS[1]), contents, queue, deadlines, token, leases}
