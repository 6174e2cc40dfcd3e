-- Delete a semaphore's permit count (Redisson's RSemaphore.delete), so its
-- permits can be set again. Nothing is published: a deleted semaphore has
-- no permits, so no waiter could take one (as in Redisson).
-- KEYS[1]  the semaphore
-- Returns  1 when it existed; 0 otherwise.
return redis.call('del', KEYS[1])
