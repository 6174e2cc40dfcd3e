-- Release one hold of a fair lock, idempotently, and wake the head waiter.
-- Loaded after fair_lock_prelude.lua (evict_stale_waiters).
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue: redisson_lock_queue:{name}
-- KEYS[3]  the slot deadlines: redisson_lock_timeout:{name}
-- KEYS[4]  the channel prefix, redisson_lock__channel:{name}; the head waiter
--          listens on <prefix>:<its id>
-- KEYS[5]  this request's unlock latch, redisson_unlock_latch:{name}:<request id>
-- KEYS[6]  optional (redisync only): the record of the acquire attempt that
--          took the hold being released (see lua/fair_lock_acquire.lua),
--          deleted with it: its outcome was known
-- ARGV[1]  the unlock message (0)
-- ARGV[2]  lease in milliseconds (the TTL a still-held lock gets)
-- ARGV[3]  holder id
-- ARGV[4]  the caller's wall clock in ms
-- ARGV[5]  how long the latch remembers this outcome, in ms
-- Returns  nil = the lock exists but the holder does not hold it; 0 = one hold
--          released, still held; 1 = released (or already gone, as in Redisson)
--          and the head waiter told.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[2], 'lease', 1, MAX_MS)
    or bad_bounded(ARGV[4], 'now', 0, MAX_TIME)
    or bad_bounded(ARGV[5], 'latch timeout', 1, MAX_MS)
if bad then
    return bad
end
local done = redis.call('get', KEYS[5])
if done then
    return tonumber(done)
end
local now = tonumber(ARGV[4])
evict_stale_waiters(KEYS[2], KEYS[3], now)
-- A lock already gone (expired) counts as released, as in Redisson.
local held = redis.call('exists', KEYS[1]) == 1
if held and redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
if KEYS[6] then
    redis.call('del', KEYS[6])
end
if held then
    if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
        redis.call('pexpire', KEYS[1], ARGV[2])
        redis.call('set', KEYS[5], 0, 'px', ARGV[5])
        return 0
    end
    redis.call('del', KEYS[1])
end
local head = redis.call('lindex', KEYS[2], 0)
if head ~= false then
    redis.call('publish', KEYS[4] .. ':' .. head, ARGV[1])
end
redis.call('set', KEYS[5], 1, 'px', ARGV[5])
return 1
