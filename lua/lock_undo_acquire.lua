-- Undo exactly one acquire attempt of a reentrant lock whose outcome is
-- unknown (its request left, no reply came), and nothing else: not a hold
-- another thread of the same holder, or a retry, took meanwhile. Also the
-- fenced lock's undo (its record, 'taken:<token>', holds the attempt's
-- token; the token stays spent: tokens only grow).
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel, redisson_lock__channel:{name}
-- KEYS[3]  the attempt's record, {name}:redisync_attempt:<attempt id>
-- ARGV[1]  the unlock message (0)
-- ARGV[2]  holder id
-- ARGV[3]  how long the record (now 'undone') is kept, in ms, so that the
--          attempt, if it arrives later still, is refused (see
--          lua/lock_acquire.lua): past every copy's window
-- ARGV[4]  optional: 1 = forget the record instead of marking it undone
--          (a replica-acknowledgement rollback, resent at once)
-- The hold count goes down by one; the lock's TTL is left as it is (never
-- shortened under the holds that remain).
-- Returns  0 = the attempt took no hold (or it has expired): nothing to
--          undo, and it never will; 1 = its hold removed, others remain;
--          2 = its hold removed, the lock released and the unlock published.
--          Idempotent: a repeat finds the record 'undone' and returns 0.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[3], 'lease', 1, MAX_MS)
if bad then
    return bad
end
local record = take_record(KEYS[3], 'undone', ARGV[3], ARGV[4])
if not record or string.sub(record, 1, 5) ~= 'taken' or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return 0
end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
    return 1
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 2
