-- Return a leased permit to a permit-expirable semaphore.
-- Loaded after expirable_prelude.lua (reclaim_expired).
-- KEYS[1]  available permits
-- KEYS[2]  leased permits, {name}:timeout
-- KEYS[3]  the channel, redisson_sc:{name}
-- ARGV[1]  the permit id
-- ARGV[2]  the caller's wall clock in ms
-- Returns  1 when the permit was leased and is now returned (count
--          published); 0 when it is unknown or its lease had run out (an
--          expired permit is reclaimed, not released by its holder).
local ends = redis.call('zscore', KEYS[2], ARGV[1])
if ends == false or tonumber(ends) <= tonumber(ARGV[2]) then
    reclaim_expired(KEYS[1], KEYS[2], KEYS[3], ARGV[2])
    return 0
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('publish', KEYS[3], redis.call('incr', KEYS[1]))
return 1
