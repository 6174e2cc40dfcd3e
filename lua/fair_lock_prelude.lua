-- Shared by the fair-lock scripts, prepended to each when it is loaded
-- (after lua/window_prelude.lua: window_now).

-- Evicts queued waiters whose slot deadline has passed (dead or gone),
-- from the head of the queue until a live one is found; returns that one
-- (false when the queue is empty). With `mark_prefix` (the waiters' direct
-- marks, {name}:redisync_fair_direct:), also up to four heads other than
-- `caller` whose mark (see lua/fair_lock_acquire.lua, '<wait id>:<allowance>:
-- <live until>') is past its live-until: a live redisync waiter pushes it on
-- at least once per claim window, so such a one is gone. (A mark without a
-- live-until, an older redisync's, or none: not known to be gone.)
local function evict_stale_waiters(queue, timeouts, now, mark_prefix, caller)
    local gone = 0
    while true do
        local first = redis.call('lindex', queue, 0)
        if first == false then
            return false
        end
        local deadline = tonumber(redis.call('zscore', timeouts, first))
        local live_until = false
        if deadline and deadline > now and mark_prefix and first ~= caller and gone < 4 then
            local mark = redis.call('get', mark_prefix .. first)
            live_until = mark and tonumber(string.match(mark, '^[^:]*:%d+:(%d+)$'))
            if live_until then
                local time = window_now or redis.call('time')
                if time[1] * 1000 + math.floor(time[2] / 1000) <= live_until then
                    live_until = false
                end
            end
        end
        if deadline == nil or deadline <= now or live_until then
            if live_until then
                gone = gone + 1
                redis.call('del', mark_prefix .. first)
            end
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
