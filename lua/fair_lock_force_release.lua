-- Delete a fair lock whoever holds it and wake the head waiter.
-- Loaded after args_prelude.lua, op_record_prelude.lua and
-- fair_lock_prelude.lua (evict_stale_waiters).
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue: redisson_lock_queue:{name}
-- KEYS[3]  the slot deadlines: redisson_lock_timeout:{name}
-- KEYS[4]  the channel prefix, redisson_lock__channel:{name}
-- KEYS[5]  optional (redisync only): this call's record,
--          {name}:redisync_op:<op id> (see op_record_prelude.lua): a copy
--          of a call that already acted returns its first outcome and
--          writes nothing; one settled as not done replies
--          `ERR late request` and writes nothing.
-- ARGV[1]  the unlock message (0)
-- ARGV[2]  the caller's wall clock in ms
-- ARGV[3]  with the record: how long it is kept, ms
-- Returns  1 when the lock existed; 0 otherwise.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[2], 'now', 0, MAX_TIME)
if bad then
    return bad
end
local replay = op_replay(2)
if replay ~= nil then
    return replay
end
local now = tonumber(ARGV[2])
local head = evict_stale_waiters(KEYS[2], KEYS[3], now)
if redis.call('del', KEYS[1]) == 1 then
    if head then
        redis.call('publish', KEYS[4] .. ':' .. head, ARGV[1])
    end
    return op_keep(1)
end
return op_keep(0)
