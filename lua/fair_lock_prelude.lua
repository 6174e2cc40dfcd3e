-- Shared by the fair-lock scripts, prepended to each when it is loaded.
-- Evicts queued waiters whose slot deadline has passed (dead or gone),
-- from the head of the queue until a live one is found.
local function evict_stale_waiters(queue, timeouts, now)
    while true do
        local first = redis.call('lindex', queue, 0)
        if first == false then
            return
        end
        local deadline = tonumber(redis.call('zscore', timeouts, first))
        if deadline == nil or deadline <= now then
            redis.call('zrem', timeouts, first)
            redis.call('lpop', queue)
        else
            return
        end
    end
end
