-- Delete a lock whoever holds it and wake its waiters.
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel
-- ARGV[1]  the unlock message (0)
-- Returns  1 when the lock existed (and the message was published); 0 otherwise.
if redis.call('del', KEYS[1]) == 1 then
    redis.call('publish', KEYS[2], ARGV[1])
    return 1
end
return 0
