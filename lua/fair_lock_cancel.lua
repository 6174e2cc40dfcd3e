-- Leave a fair lock's queue (a waiter that gave up): later waiters' slots
-- move up by the leaver's allowance.
-- KEYS[1]  the queue: redisson_lock_queue:{name}
-- KEYS[2]  the slot deadlines: redisson_lock_timeout:{name}
-- KEYS[3]  optional (redisync only): the waiter's direct mark,
--          {name}:redisync_fair_direct:<waiter id> (see
--          lua/fair_lock_acquire.lua), deleted: no release hands it the lock
-- KEYS[4]  optional (redisync only; KEYS[3] when there is no mark): this
--          call's record, {name}:redisync_op:<op id> (see
--          lua/op_record_prelude.lua): a copy of a cancel that already
--          acted returns its first outcome and writes nothing, so a copy
--          held by a middlebox cannot land after the same thread queued
--          again and take its new place away
-- ARGV[1]  the leaving waiter's id
-- ARGV[2]  its allowance in ms
-- ARGV[3]  with the record: how long it is kept, ms
-- Loaded after args_prelude.lua and op_record_prelude.lua.
-- Returns  1 if it was queued, 0 otherwise.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[2], 'wait allowance', 1, MAX_MS)
if bad then
    return bad
end
local replay = op_replay(2)
if replay ~= nil then
    return replay
end
-- The mark, unless KEYS[3] is the record.
local mark = KEYS[3]
if op_key and #KEYS == 3 then
    mark = nil
end
if mark then
    redis.call('del', mark)
end
local queue = redis.call('lrange', KEYS[1], 0, -1)
local i = 1
while i <= #queue and queue[i] ~= ARGV[1] do
    i = i + 1
end
if i > #queue then
    redis.call('zrem', KEYS[2], ARGV[1])
    return op_keep(0)
end
for j = i + 1, #queue do
    redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[j])
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
return op_keep(1)
