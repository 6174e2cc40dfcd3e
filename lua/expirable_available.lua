-- Count a permit-expirable semaphore's available permits, reclaiming
-- expired leases first.
-- Loaded after expirable_prelude.lua (reclaim_expired).
-- KEYS[1]  available permits
-- KEYS[2]  leased permits, {name}:timeout
-- KEYS[3]  the channel, redisson_sc:{name}
-- ARGV[1]  the caller's wall clock in ms
-- Returns  the available permits as stored (a decimal string; nil when
--          absent = 0).
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'now', 0, MAX_TIME)
if bad then
    return bad
end
reclaim_expired(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
return redis.call('get', KEYS[1])
