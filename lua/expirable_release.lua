-- Return leased permits to a permit-expirable semaphore.
-- Loaded after expirable_prelude.lua (reclaim_expired, return_leased).
-- KEYS[1]  available permits
-- KEYS[2]  leased permits, {name}:timeout
-- KEYS[3]  the channel, redisson_sc:{name}
-- KEYS[4]  optional (redisync only): an acquire attempt's record to
--          forget (the replica-acknowledgement undo, which sends the same
--          attempt again at once)
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
if KEYS[4] then
    redis.call('del', KEYS[4])
end
local returned = return_leased(KEYS[1], KEYS[2], KEYS[3], ARGV[1], 2)
reclaim_expired(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
return returned
