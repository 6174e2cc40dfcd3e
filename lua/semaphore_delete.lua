-- Delete a semaphore's keys (Redisson's RSemaphore.delete and
-- RPermitExpirableSemaphore.delete), so its permits can be set again.
-- Nothing is published: a deleted semaphore has no permits, so no waiter
-- could take one (as in Redisson).
-- Loaded after args_prelude.lua and op_record_prelude.lua.
-- KEYS[1]  the semaphore (its available count)
-- KEYS[2]  optional: a permit-expirable semaphore's leases zset
-- KEYS[n]  optional (redisync only), last: this call's record,
--          {name}:redisync_op:<op id> (see op_record_prelude.lua): a copy
--          of a call that already acted returns its first outcome and
--          writes nothing; one settled as not done replies
--          `ERR late request` and writes nothing.
-- ARGV[1]  optional: with the record, how long it is kept, ms
-- Returns  1 when any of them existed; 0 otherwise.
local replay = op_replay(0)
if replay ~= nil then
    return replay
end
local last = #KEYS
if op_key then
    last = last - 1
end
if redis.call('del', unpack(KEYS, 1, last)) > 0 then
    return op_keep(1)
end
return op_keep(0)
