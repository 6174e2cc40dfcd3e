-- Undo exactly one acquire attempt of a fair lock whose outcome is unknown
-- (its request left, no reply came), and nothing else: not a hold another
-- thread of the same holder, or a retry, took meanwhile. (A queue entry the
-- attempt may have left is the waiter's give-up: lua/fair_lock_cancel.lua.)
-- Loaded after fair_lock_prelude.lua (evict_stale_waiters).
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue: redisson_lock_queue:{name}
-- KEYS[3]  the slot deadlines: redisson_lock_timeout:{name}
-- KEYS[4]  the channel prefix, redisson_lock__channel:{name}; the head waiter
--          listens on <prefix>:<its id>
-- KEYS[5]  the attempt's record, {name}:redisync_attempt:<attempt id>
-- ARGV[1]  the unlock message (0)
-- ARGV[2]  holder id
-- ARGV[3]  how long the record (now 'undone') is kept, in ms, so that the
--          attempt, if it arrives later still, is refused (see
--          lua/fair_lock_acquire.lua): past every copy's window
-- ARGV[4]  the caller's wall clock in ms
-- ARGV[5]  optional: 1 = forget the record instead of marking it undone
--          (a replica-acknowledgement rollback, resent at once)
-- The hold count goes down by one; the lock's TTL is left as it is (never
-- shortened under the holds that remain).
-- Returns  0 = the attempt took no hold (or it has expired): nothing to
--          undo, and it never will; 1 = its hold removed, others remain;
--          2 = its hold removed, the lock released and the head waiter told
--          (as a release tells it). Idempotent: a repeat returns 0.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[3], 'lease', 1, MAX_MS)
    or bad_bounded(ARGV[4], 'now', 0, MAX_TIME)
if bad then
    return bad
end
local record = take_record(KEYS[5], 'undone', ARGV[3], ARGV[5])
if record ~= 'taken' or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return 0
end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
    return 1
end
redis.call('del', KEYS[1])
local head = evict_stale_waiters(KEYS[2], KEYS[3], tonumber(ARGV[4]))
if head then
    redis.call('publish', KEYS[4] .. ':' .. head, ARGV[1])
end
return 2
