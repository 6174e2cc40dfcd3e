-- Release one hold of a fair lock, idempotently; on the last one, hand the
-- lock to the head waiter outright (a redisync waiter that listens) or
-- wake it to try (Redisson's way, for everyone else).
-- Loaded after fair_lock_prelude.lua (evict_stale_waiters, shift_slots).
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue: redisson_lock_queue:{name}
-- KEYS[3]  the slot deadlines: redisson_lock_timeout:{name}
-- KEYS[4]  the channel prefix, redisson_lock__channel:{name}; the head waiter
--          listens on <prefix>:<its id>
-- KEYS[5]  this request's unlock latch: a fresh key,
--          redisson_unlock_latch:{name}:<request id>, or (redisync only) the
--          record of the acquire attempt that took the hold being released,
--          {name}:redisync_attempt:<id> (see lua/fair_lock_acquire.lua),
--          which then becomes the latch, as lua/lock_release.lua keeps it: a
--          record still says 'taken'; once released it holds the outcome, so
--          a late copy of that acquire is refused as well
-- ARGV[1]  the unlock message (0)
-- ARGV[2]  lease in milliseconds (the TTL a still-held lock gets)
-- ARGV[3]  holder id
-- ARGV[4]  the caller's wall clock in ms
-- ARGV[5]  how long the latch remembers this outcome, in ms
-- ARGV[6]  optional (redisync only): the prefix of the waiters' direct marks,
--          {name}:redisync_fair_direct: (the holder id follows; see
--          lua/fair_lock_acquire.lua). A head with a mark
--          '<wait id>:<allowance>:<live until>' whose channel has a listener
--          (PUBLISH counts them) is handed the lock outright: the hash holds it once, with ARGV[7] as TTL (its
--          watchdog renews it), it leaves the queue, those behind move up a
--          slot, and its channel carries 'h:<server ms>:<claim ms>:<wait
--          id>:<holder id>' instead of the unlock message. A marked head
--          nobody hears keeps its place while its mark says it is alive (it
--          tries when it listens again), and leaves the queue once the mark
--          is past its live-until (server ms). A head without a mark
--          (Redisson's) gets the unlock message.
-- ARGV[7]  with ARGV[6]: the claim window in ms: how long a handed hold
--          waits for its waiter's watchdog
-- Returns  nil = the lock exists but the holder does not hold it; 0 = one hold
--          released, still held; 1 = released (or already gone, as in Redisson)
--          and the head waiter told; 3 = released and handed to the head.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[2], 'lease', 1, MAX_MS)
    or bad_bounded(ARGV[4], 'now', 0, MAX_TIME)
    or bad_bounded(ARGV[5], 'latch timeout', 1, MAX_MS)
    or (ARGV[6] and bad_bounded(ARGV[7], 'claim window', 1, MAX_MS))
if bad then
    return bad
end
local done = redis.call('get', KEYS[5])
if done and done ~= 'taken' then
    return tonumber(done)
end
-- A lock already gone (expired) counts as released, as in Redisson.
local count = redis.call('hget', KEYS[1], ARGV[3])
if not count and redis.call('exists', KEYS[1]) == 1 then
    -- Not held by this holder: its hold ran out (or was forced free). A
    -- record that still says taken is the lapsed hold's: mark it, or a
    -- renewal of that hold still on its way would renew the holder's next
    -- hold (a copy of this call reads 'lapsed' as nil too).
    if done then
        redis.call('set', KEYS[5], 'lapsed', 'px', ARGV[5])
    end
    return nil
end
if count and tonumber(count) > 1 then
    redis.call('hincrby', KEYS[1], ARGV[3], -1)
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[5], 0, 'px', ARGV[5])
    return 0
end
if count then
    redis.call('del', KEYS[1])
end
-- FIFO: a marked head nobody hears (its client between two
-- subscriptions, or gone) is not handed the lock. While its mark says it
-- is alive (a live waiter retries, and so refreshes it, at least once per
-- claim window) it keeps its place: it takes the lock with its own attempt
-- when it listens again. One whose mark went stale is gone: it leaves the
-- queue (a few at most per release), rather than holding up everyone
-- behind it until its slot runs out. (A mark without a live-until, from an
-- older redisync, counts as alive.)
if ARGV[6] then
    for _ = 1, 4 do
        local head = redis.call('lindex', KEYS[2], 0)
        -- The mark stays (it names a wait that has ended once it is handed
        -- the lock; the holder's next join rewrites it): one call, not two.
        local marked = head and redis.call('get', ARGV[6] .. head)
        local wait, allowance, live_until
        if marked then
            wait, allowance, live_until = string.match(marked, '^([^:]*):(%d+):(%d+)$')
            if not wait then
                wait, allowance = string.match(marked, '^([^:]*):(%d+)$')
            end
        end
        if not wait then
            break
        end
        local now = window_now or redis.call('time')
        local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
        local message = 'h:' .. string.format('%d', now_ms) .. ':' .. ARGV[7] .. ':' .. wait
            .. ':' .. head
        if redis.call('publish', KEYS[4] .. ':' .. head, message) > 0 then
            redis.call('hset', KEYS[1], head, 1)
            redis.call('pexpire', KEYS[1], ARGV[7])
            redis.call('lpop', KEYS[2])
            redis.call('zrem', KEYS[3], head)
            shift_slots(KEYS[3], allowance)
            redis.call('set', KEYS[5], 3, 'px', ARGV[5])
            return 3
        end
        if not live_until or now_ms <= tonumber(live_until) then
            break
        end
        redis.call('lpop', KEYS[2])
        redis.call('zrem', KEYS[3], head)
        redis.call('del', ARGV[6] .. head)
    end
end
local head = evict_stale_waiters(KEYS[2], KEYS[3], tonumber(ARGV[4]))
if head then
    redis.call('publish', KEYS[4] .. ':' .. head, ARGV[1])
end
redis.call('set', KEYS[5], 1, 'px', ARGV[5])
return 1
