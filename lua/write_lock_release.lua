-- Release one write hold, idempotently.
-- KEYS[1]  the lock hash
-- KEYS[2]  the channel, redisson_rwlock:{name}
-- KEYS[3]  this request's unlock latch: a fresh key,
--          redisson_unlock_latch:{name}:<request id>, or (redisync only) the
--          record of the acquire attempt that took the hold being released,
--          {name}:redisync_attempt:<id> (see lua/write_lock_acquire.lua),
--          which then becomes the latch, as lua/lock_release.lua keeps it: a
--          record still says 'taken'; once released it holds the outcome, so
--          a late copy of that acquire is refused as well
-- ARGV[1]  the read-unlock message (1: wakes every waiter)
-- ARGV[2]  lease in milliseconds (the TTL a still-held lock gets)
-- ARGV[3]  the holder's write field, <holder>:write
-- ARGV[4]  how long the latch remembers this outcome, in ms
-- Returns  nil = the holder does not hold the write lock; 0 = one hold released,
--          still held; 1 = the write hold is gone: the lock is free (message
--          published) or left in read mode to the holder's own read holds.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[2], 'lease', 1, MAX_MS)
    or bad_bounded(ARGV[4], 'latch timeout', 1, MAX_MS)
if bad then
    return bad
end
local done = redis.call('get', KEYS[3])
if done and done ~= 'taken' then
    return tonumber(done)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    -- Not held by this holder: its hold ran out (or was forced free). A
    -- record that still says taken is the lapsed hold's: mark it, or a
    -- renewal of that hold still on its way would renew the holder's next
    -- hold (a copy of this call reads 'lapsed' as nil too).
    if done then
        redis.call('set', KEYS[3], 'lapsed', 'px', ARGV[4])
    end
    return nil
end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], 0, 'px', ARGV[4])
    return 0
end
drop_write_lock(KEYS[1], KEYS[2], ARGV[3], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[4])
return 1
