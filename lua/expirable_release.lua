-- Return leased permits to a permit-expirable semaphore.
-- Loaded after expirable_prelude.lua (reclaim_expired).
-- KEYS[1]  available permits
-- KEYS[2]  leased permits, {name}:timeout
-- KEYS[3]  the channel, redisson_sc:{name}
-- ARGV[1]  the caller's wall clock in ms
-- ARGV[2..] the permit ids in hex (1 to 10000; a repeated id counts once)
-- Returns  how many of them were leased and are now returned (the new
--          count is published when any was); an unknown id, or one whose
--          lease had run out (it is reclaimed, not released by its holder),
--          does not count.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'now', 0, MAX_TIME) or bad_ids(2)
if bad then
    return bad
end
local live, seen = {}, {}
for i = 2, #ARGV do
    local id = permit_member(ARGV[i])
    if not seen[id] then
        seen[id] = true
        local ends = redis.call('zscore', KEYS[2], id)
        if ends ~= false and tonumber(ends) > tonumber(ARGV[1]) then
            live[#live + 1] = id
        end
    end
end
if #live > 0 then
    -- The count first: if INCRBY fails (not an integer, overflow) the
    -- leases are still recorded, where removing them first would lose them.
    local value = redis.call('incrby', KEYS[1], #live)
    for i = 1, #live, 5000 do
        redis.call('zrem', KEYS[2], unpack(live, i, math.min(i + 4999, #live)))
    end
    redis.call('publish', KEYS[3], value)
end
reclaim_expired(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
return #live
