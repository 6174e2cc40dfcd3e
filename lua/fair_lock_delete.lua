-- Delete a fair lock (Redisson's RFairLock.delete): the hash, the waiter
-- queue and the slot deadlines, whoever holds it; then wake every waiter
-- that was queued, on its own channel, so each retries at once (and queues
-- again) instead of sleeping until its slot runs out. Redisson deletes the
-- three keys and publishes nothing; its waiters read the unlock message as
-- any unlock: retry.
-- Loaded after args_prelude.lua and op_record_prelude.lua.
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
-- ARGV[2]  with the record: how long it is kept, ms
-- Returns  1 when any of the three keys existed; 0 otherwise.
local replay = op_replay(1)
if replay ~= nil then
    return replay
end
local waiters = redis.call('lrange', KEYS[2], 0, -1)
local existed = redis.call('del', KEYS[1], KEYS[2], KEYS[3])
for _, waiter in ipairs(waiters) do
    redis.call('publish', KEYS[4] .. ':' .. waiter, ARGV[1])
end
if existed > 0 then
    return op_keep(1)
end
return op_keep(0)
