-- Leave a fair lock's queue (a waiter that gave up): later waiters' slots
-- move up by the leaver's allowance.
-- KEYS[1]  the queue: redisson_lock_queue:{name}
-- KEYS[2]  the slot deadlines: redisson_lock_timeout:{name}
-- KEYS[3]  optional (redisync only): the waiter's direct mark,
--          {name}:redisync_fair_direct:<waiter id> (see
--          lua/fair_lock_acquire.lua), deleted: no release hands it the lock
-- ARGV[1]  the leaving waiter's id
-- ARGV[2]  its allowance in ms
-- Returns  1 if it was queued, 0 otherwise.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[2], 'wait allowance', 1, MAX_MS)
if bad then
    return bad
end
if KEYS[3] then
    redis.call('del', KEYS[3])
end
local queue = redis.call('lrange', KEYS[1], 0, -1)
local i = 1
while i <= #queue and queue[i] ~= ARGV[1] do
    i = i + 1
end
if i > #queue then
    redis.call('zrem', KEYS[2], ARGV[1])
    return 0
end
for j = i + 1, #queue do
    redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[j])
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
return 1
