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
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[2], 'now', 0, MAX_TIME)
if bad then
    return bad
end
local ends = redis.call('zscore', KEYS[2], ARGV[1])
if ends == false or tonumber(ends) <= tonumber(ARGV[2]) then
    reclaim_expired(KEYS[1], KEYS[2], KEYS[3], ARGV[2])
    return 0
end
-- The count first: if INCR fails (not an integer, overflow) the lease is
-- still recorded, where removing it first would lose the permit.
local value = redis.call('incr', KEYS[1])
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('publish', KEYS[3], value)
return 1
