-- Delete a read-write lock held in the given mode and wake its waiters.
-- KEYS[1]  the lock hash
-- KEYS[2]  the channel, redisson_rwlock:{name}
-- ARGV[1]  the mode this half forces: read or write
-- ARGV[2]  the message: 0 for read (unlock), 1 for write (read-unlock)
-- Returns  1 when the lock was held in that mode and is now deleted; 0 otherwise.
if redis.call('hget', KEYS[1], 'mode') == ARGV[1] then
    redis.call('del', KEYS[1])
    redis.call('publish', KEYS[2], ARGV[2])
    return 1
end
return 0
