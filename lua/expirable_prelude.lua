-- Shared by the permit-expirable semaphore scripts, prepended to each when
-- it is loaded. Returns every permit whose lease ran out to the pool and
-- announces the new count.
local function reclaim_expired(available, leases, channel, now)
    local expired = redis.call('zrangebyscore', leases, '-inf', now)
    if #expired == 0 then
        return
    end
    -- The count first: if INCRBY fails (not an integer, overflow) nothing
    -- has changed, where removing the leases first would lose the permits.
    local value = redis.call('incrby', available, #expired)
    for i = 1, #expired, 5000 do
        redis.call('zrem', leases, unpack(expired, i, math.min(i + 4999, #expired)))
    end
    if value > 0 then
        redis.call('publish', channel, value)
    end
end
