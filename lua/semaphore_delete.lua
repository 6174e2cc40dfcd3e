-- Delete a semaphore's keys (Redisson's RSemaphore.delete and
-- RPermitExpirableSemaphore.delete), so its permits can be set again.
-- Nothing is published: a deleted semaphore has no permits, so no waiter
-- could take one (as in Redisson).
-- KEYS[1]  the semaphore (its available count)
-- KEYS[2]  optional: a permit-expirable semaphore's leases zset
-- Returns  1 when any of them existed; 0 otherwise.
if redis.call('del', unpack(KEYS)) > 0 then
    return 1
end
return 0
