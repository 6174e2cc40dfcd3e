-- Shared by the fair-lock scripts, prepended to each when it is loaded.
-- Evicts queued waiters whose slot deadline has passed (dead or gone),
-- from the head of the queue until a live one is found; returns that one
-- (false when the queue is empty).
local function evict_stale_waiters(queue, timeouts, now)
    while true do
        local first = redis.call('lindex', queue, 0)
        if first == false then
            return false
        end
        local deadline = tonumber(redis.call('zscore', timeouts, first))
        if deadline == nil or deadline <= now then
            redis.call('zrem', timeouts, first)
            redis.call('lpop', queue)
        else
            return first
        end
    end
end

-- The head of the queue took the lock: every waiter left moves up one
-- slot (its deadline comes `allowance` ms sooner), as Redisson's acquire
-- does (one ZINCRBY per waiter there); here one ZADD rewrites them all,
-- in chunks of at most 1000 (Lua's unpack has a limit).
local function shift_slots(timeouts, allowance)
    local by = tonumber(allowance)
    local slots = redis.call('zrange', timeouts, 0, -1, 'withscores')
    local unpack = table.unpack or unpack
    local pairs_at = {}
    for i = 1, #slots, 2 do
        pairs_at[#pairs_at + 1] = tonumber(slots[i + 1]) - by
        pairs_at[#pairs_at + 1] = slots[i]
        if #pairs_at >= 2000 then
            redis.call('zadd', timeouts, unpack(pairs_at))
            pairs_at = {}
        end
    end
    if #pairs_at > 0 then
        redis.call('zadd', timeouts, unpack(pairs_at))
    end
end
