-- A waiter of a reentrant lock stops waiting (redisync only): it leaves the
-- lock's waiter queue, so that no release hands it the lock; a hold that a
-- release reserved for it meanwhile (its field with hold count 0, see
-- lua/lock_release.lua), or handed to it outright, is given up: the lock is freed and its unlock
-- message published, so the next waiter does not wait out the claim window.
-- KEYS[1]  the waiter queue, {name}:redisync_waiters (lua/lock_acquire.lua)
-- KEYS[2]  the lock hash
-- KEYS[3]  the lock's channel, redisson_lock__channel:{name}
-- ARGV[1]  the waiter's holder id
-- ARGV[2]  the unlock message (0)
-- ARGV[3]  the wait's queue entry when it was queued to be handed the lock
--          outright ('d|<wait id>|<holder id>'): it holds nothing of its own
--          (a thread that waits), so a hold of its holder id is one a
--          release handed it; '' otherwise
-- Returns  1 when a reserved or handed hold was given up, 0 otherwise.
redis.call('zrem', KEYS[1], ARGV[1], ARGV[3])
local held = redis.call('hget', KEYS[2], ARGV[1])
if held == '0' or (held and ARGV[3] ~= '') then
    redis.call('del', KEYS[2])
    redis.call('publish', KEYS[3], ARGV[2])
    return 1
end
return 0
