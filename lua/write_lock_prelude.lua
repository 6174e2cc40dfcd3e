-- Shared by the scripts that drop a holder's last write hold (the write
-- release and the write undo), prepended to each when it is loaded: the
-- write field goes; the lock is deleted, or left in read mode to the
-- holder's own read holds; the read-unlock message is published.
local function drop_write_lock(lock, channel, write_field, message)
    redis.call('hdel', lock, write_field)
    if redis.call('hlen', lock) == 1 then
        redis.call('del', lock)
    else
        -- Downgraded: the holder's read holds remain; other readers may join now.
        redis.call('hset', lock, 'mode', 'read')
    end
    redis.call('publish', channel, message)
end
