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
--          outright ('d|<wait id>|<holder id>', or 'd|<wait id>+<lease
--          ms>|<holder id>' with a fixed lease): it holds nothing of its own
--          (a thread that waits), so a hold of its holder id is one a
--          release handed it; '' otherwise
-- KEYS[4]  optional: this call's record, {name}:redisync_op:<op id> (see
--          lua/op_record_prelude.lua): a copy of a leave that already
--          acted returns its first outcome and writes nothing. Without
--          it, a copy held by a middlebox while the client resent the
--          leave, landing after the same thread took the lock with an
--          acquire of its own, would free that hold (the holder id is the
--          same, and an outright entry gives up any hold of it).
-- ARGV[4]  with KEYS[4]: how long the record is kept, ms
-- Loaded after args_prelude.lua and op_record_prelude.lua.
-- Returns  1 when a reserved or handed hold was given up, 0 otherwise.
local replay = op_replay(3)
if replay ~= nil then
    return replay
end
redis.call('zrem', KEYS[1], ARGV[1], ARGV[3])
local held = redis.call('hget', KEYS[2], ARGV[1])
if held == '0' or (held and ARGV[3] ~= '') then
    redis.call('del', KEYS[2])
    redis.call('publish', KEYS[3], ARGV[2])
    return op_keep(1)
end
return op_keep(0)
