-- Delete a fair lock (Redisson's RFairLock.delete): the hash, the waiter
-- queue and the slot deadlines, whoever holds it; then wake every waiter
-- that was queued, on its own channel, so each retries at once (and queues
-- again) instead of sleeping until its slot runs out. Redisson deletes the
-- three keys and publishes nothing; its waiters read the unlock message as
-- any unlock: retry.
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue: redisson_lock_queue:{name}
-- KEYS[3]  the slot deadlines: redisson_lock_timeout:{name}
-- KEYS[4]  the channel prefix, redisson_lock__channel:{name}
-- ARGV[1]  the unlock message (0)
-- Returns  1 when any of the three keys existed; 0 otherwise.
local waiters = redis.call('lrange', KEYS[2], 0, -1)
local existed = redis.call('del', KEYS[1], KEYS[2], KEYS[3])
for _, waiter in ipairs(waiters) do
    redis.call('publish', KEYS[4] .. ':' .. waiter, ARGV[1])
end
if existed > 0 then
    return 1
end
return 0
