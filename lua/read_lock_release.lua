-- Release one read hold, idempotently.
-- KEYS[1]  the lock hash
-- KEYS[2]  the channel, redisson_rwlock:{name}
-- KEYS[3]  this holder's timeout key prefix, {name}:<holder>:rwlock_timeout
-- KEYS[4]  the key prefix of every holder's timeout keys, {name}
-- KEYS[5]  this request's unlock latch: a fresh key,
--          redisson_unlock_latch:{name}:<request id>, or (redisync only) the
--          record of the acquire attempt that took the hold being released,
--          {name}:redisync_attempt:<id> (see lua/read_lock_acquire.lua),
--          which then becomes the latch, as lua/lock_release.lua keeps it: a
--          record still says 'taken:<n>'; once released it holds the
--          outcome, so a late copy of that acquire is refused as well
-- ARGV[1]  the unlock message (0)
-- ARGV[2]  holder id
-- ARGV[3]  how long the latch remembers this outcome, in ms
-- Returns  nil = the holder holds no read hold; 0 = released, the lock is still
--          held (by other reads, or the holder's write); 1 = the lock is free
--          and the unlock message published.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[3], 'latch timeout', 1, MAX_MS)
if bad then
    return bad
end
local done = redis.call('get', KEYS[5])
if done and string.sub(done, 1, 5) ~= 'taken' then
    return tonumber(done)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    -- Not held by this holder: its hold ran out (or was forced free). A
    -- record that still says taken is the lapsed hold's: mark it, or a
    -- renewal of that hold still on its way would renew the holder's next
    -- hold (a copy of this call reads 'lapsed' as nil too).
    if done then
        redis.call('set', KEYS[5], 'lapsed', 'px', ARGV[3])
    end
    return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if counter == 0 then
    redis.call('hdel', KEYS[1], ARGV[2])
end
redis.call('del', KEYS[3] .. ':' .. (counter + 1))
if settle_read_lock(KEYS[1], KEYS[2], KEYS[4], mode, ARGV[1]) then
    redis.call('set', KEYS[5], 0, 'px', ARGV[3])
    return 0
end
redis.call('set', KEYS[5], 1, 'px', ARGV[3])
return 1
