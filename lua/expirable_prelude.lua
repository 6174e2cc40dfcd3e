-- Shared by the permit-expirable semaphore scripts, prepended to each when
-- it is loaded.

-- The lease end of a permit taken without a lease (Redisson's
-- nonExpirableTimeout, 922337203685477): later than any clock a script
-- accepts (2^48 ms), so such a permit is never reclaimed.
local NON_EXPIRABLE = '922337203685477'

-- nil when end is a lease end: a time (0 to 2^48 ms) or NON_EXPIRABLE.
local function bad_lease_end(value)
    if value == NON_EXPIRABLE then
        return nil
    end
    return bad_bounded(value, 'lease end', 0, MAX_TIME)
end

-- nil when ARGV[first..] holds at least one permit id and at most 10000
-- (what one call may take or release), each an even number of hex digits.
local function bad_ids(first)
    local n = #ARGV - first + 1
    if n < 1 or n > 10000 then
        return redis.error_reply('ERR invalid permits: ' .. n
            .. ' permit ids, expected 1 to 10000')
    end
    for i = first, #ARGV do
        local id = ARGV[i]
        if id == '' or #id % 2 == 1 or string.find(id, '%X') then
            return redis.error_reply('ERR invalid permit id: ' .. id
                .. ' is not an even number of hex digits')
        end
    end
    return nil
end

-- The zset member of a permit id: the bytes its hex digits spell, as
-- Redisson stores it (ByteBufUtil.decodeHexDump(permitId)).
local function permit_member(id)
    return (string.gsub(id, '%x%x', function(pair)
        return string.char(tonumber(pair, 16))
    end))
end

-- Returns every permit whose lease ran out to the pool and announces the
-- new count.
local function reclaim_expired(available, leases, channel, now)
    local expired = redis.call('zrangebyscore', leases, '-inf', now)
    if #expired == 0 then
        return
    end
    -- The count first: if INCRBY fails (not an integer, overflow) nothing
    -- has changed, where removing the leases first would lose the permits.
    local value = redis.call('incrby', available, #expired)
    for i = 1, #expired, 5000 do
        redis.call('zrem', leases, unpack(expired, i, math.min(i + 4999, #expired)))
    end
    if value > 0 then
        redis.call('publish', channel, value)
    end
end

-- Returns the leased permits among ARGV[first..] (ids in hex; a repeated
-- id counts once) to the pool and announces the new count when any was;
-- an unknown id, or one whose lease had run out (it is reclaimed, not
-- released by its holder), does not count. Returns how many were.
local function return_leased(available, leases, channel, now, first)
    local live, seen = {}, {}
    for i = first, #ARGV do
        local id = permit_member(ARGV[i])
        if not seen[id] then
            seen[id] = true
            local ends = redis.call('zscore', leases, id)
            if ends ~= false and tonumber(ends) > tonumber(now) then
                live[#live + 1] = id
            end
        end
    end
    if #live > 0 then
        -- The count first: if INCRBY fails (not an integer, overflow) the
        -- leases are still recorded, where removing them first would lose them.
        local value = redis.call('incrby', available, #live)
        for i = 1, #live, 5000 do
            redis.call('zrem', leases, unpack(live, i, math.min(i + 4999, #live)))
        end
        redis.call('publish', channel, value)
    end
    return #live
end
