-- Release one hold of a reentrant lock, idempotently.
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel, redisson_lock__channel:{name}
-- KEYS[3]  this request's unlock latch: a fresh key,
--          redisson_unlock_latch:{name}:<request id>, or (redisync only) the
--          record of the acquire attempt that took the hold being released,
--          {name}:redisync_attempt:<id> (see lua/lock_acquire.lua), which
--          then becomes the latch: one key written instead of a record
--          deleted and a latch created. A record still says 'taken'; once
--          released it holds the outcome, so a late copy of that acquire is
--          refused as well. (A fenced lock's record says 'taken:<token>'.)
-- ARGV[1]  the unlock message (0)
-- ARGV[2]  lease in milliseconds (the TTL a still-held lock gets)
-- ARGV[3]  holder id
-- ARGV[4]  how long the latch remembers this outcome, in ms
-- ARGV[5]  optional: a waiter's holder id, to hand the lock to on its last
--          hold (a direct handoff between two threads of one client): the
--          hash then holds that waiter once, with ARGV[6] as its TTL, and no
--          unlock message is published (the lock was never free)
-- ARGV[6]  with ARGV[5]: the waiter's lease in milliseconds
-- Returns  nil = the holder does not hold it; 0 = one hold released, still held;
--          1 = released and the unlock message published; 2 = released and
--          handed to the waiter. A retry with the same latch key returns the
--          first outcome without releasing again (the latch, or a record,
--          holds it for ARGV[4] ms).
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[2], 'lease', 1, MAX_MS)
    or bad_bounded(ARGV[4], 'latch timeout', 1, MAX_MS)
    or (ARGV[5] and bad_bounded(ARGV[6], 'lease', 1, MAX_MS))
if bad then
    return bad
end
local done = redis.call('get', KEYS[3])
if done and string.sub(done, 1, 5) ~= 'taken' then
    return tonumber(done)
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], 0, 'px', ARGV[4])
    return 0
end
redis.call('del', KEYS[1])
if ARGV[5] then
    redis.call('hset', KEYS[1], ARGV[5], 1)
    redis.call('pexpire', KEYS[1], ARGV[6])
    redis.call('set', KEYS[3], 2, 'px', ARGV[4])
    return 2
end
redis.call('publish', KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[4])
return 1
