-- Shared by the scripts that drop one read hold (the read release and the
-- read undo), prepended to each when it is loaded, after the hold's count
-- and its timeout key are gone: the lock lives on as long as its longest
-- remaining hold (or as the holder's write hold, in write mode); else it is
-- deleted and the unlock message published. Returns true when the lock is
-- still held.
local function settle_read_lock(lock, channel, key_prefix, mode, message)
    if redis.call('hlen', lock) > 1 then
        -- The lock lives as long as its longest remaining hold.
        local longest = -3
        local fields = redis.call('hkeys', lock)
        for _, field in ipairs(fields) do
            local holds = tonumber(redis.call('hget', lock, field))
            if type(holds) == 'number' then
                for i = holds, 1, -1 do
                    local ttl = redis.call('pttl', key_prefix .. ':' .. field .. ':rwlock_timeout:' .. i)
                    longest = math.max(ttl, longest)
                end
            end
        end
        if longest > 0 then
            redis.call('pexpire', lock, longest)
            return true
        end
        if mode == 'write' then
            return true
        end
    end
    redis.call('del', lock)
    redis.call('publish', channel, message)
    return false
end
