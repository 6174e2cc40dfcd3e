-- Acquire, re-enter or queue for a fair lock (Redisson's RFairLock).
-- Loaded after fair_lock_prelude.lua (evict_stale_waiters).
-- KEYS[1]  the lock: a hash of holder id -> hold count
-- KEYS[2]  the queue of waiter ids, FIFO: redisson_lock_queue:{name}
-- KEYS[3]  waiter id -> slot deadline in ms: redisson_lock_timeout:{name}
-- KEYS[4]  optional (redisync only): this attempt's record,
--          {name}:redisync_attempt:<attempt id>, written only when the
--          attempt takes a hold: 1 with the lease as TTL (0 = undone, by
--          lua/fair_lock_undo_acquire.lua). An attempt whose record is there
--          does not act again, and writes nothing (not even the queue): 1 and
--          the holder still holds it (the request resent) = acquired, no
--          second hold; otherwise refused as a late request.
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id, <client uuid>:<thread number>
-- ARGV[3]  the waiter's allowance in ms (fair-lock wait timeout, or the try_lock_for wait)
-- ARGV[4]  the caller's wall clock in ms
-- ARGV[5]  1 = join the queue if the lock cannot be had now; 0 = do not (try_lock)
-- Returns  nil when acquired (hold count + 1, TTL reset to the lease);
--          otherwise how long to wait in ms before trying again (the slot
--          ahead's remaining time, or the lock's PTTL; -1 = until a message).
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
    or bad_bounded(ARGV[3], 'wait allowance', 1, MAX_MS)
    or bad_bounded(ARGV[4], 'now', 0, MAX_TIME)
if bad then
    return bad
end
if KEYS[4] then
    local record = redis.call('get', KEYS[4])
    if record then
        if record ~= '0' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
            return nil
        end
        return redis.error_reply('ERR late request: this acquire attempt was undone already')
    end
end
local now = tonumber(ARGV[4])
evict_stale_waiters(KEYS[2], KEYS[3], now)
-- Free, and nobody queued or the caller is first: take it.
if redis.call('exists', KEYS[1]) == 0
    and (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], ARGV[2])
    -- Everyone behind moves up one slot.
    local waiters = redis.call('zrange', KEYS[3], 0, -1)
    for i = 1, #waiters do
        redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), waiters[i])
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if KEYS[4] then
        redis.call('set', KEYS[4], 1, 'px', ARGV[1])
    end
    return nil
end
-- Re-entry.
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if KEYS[4] then
        redis.call('set', KEYS[4], 1, 'px', ARGV[1])
    end
    return nil
end
if ARGV[5] ~= '1' then
    return math.max(redis.call('pttl', KEYS[1]), 1)
end
-- Already queued: wait until the slot ahead runs out.
local mine = redis.call('zscore', KEYS[3], ARGV[2])
if mine ~= false then
    local ahead = tonumber(mine) - tonumber(ARGV[3]) - now
    if ahead > 0 then
        return ahead
    end
    -- The slot ahead ran out while its owner still holds the lock: wait for
    -- the lock's TTL (-1 = none: wait for the unlock message), not 1 ms.
    local ttl = redis.call('pttl', KEYS[1])
    if ttl ~= -2 then
        return ttl
    end
    -- Free, and a live head has not taken it yet: wait for the head's slot.
    local head = redis.call('lindex', KEYS[2], 0)
    return math.max(tonumber(redis.call('zscore', KEYS[3], head)) - now, 1)
end
-- Join the tail; the slot lasts the allowance past the slot ahead (or the lock's TTL).
local last = redis.call('lindex', KEYS[2], -1)
local ttl
if last ~= false and last ~= ARGV[2] then
    ttl = tonumber(redis.call('zscore', KEYS[3], last)) - now
else
    ttl = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], ttl + tonumber(ARGV[3]) + now, ARGV[2]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[2])
end
return math.max(ttl, 1)
