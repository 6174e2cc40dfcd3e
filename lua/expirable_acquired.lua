-- Count a permit-expirable semaphore's leased permits (Redisson's
-- acquiredPermits), reclaiming expired leases first.
-- Loaded after expirable_prelude.lua (reclaim_expired).
-- KEYS[1]  available permits
-- KEYS[2]  leased permits, {name}:timeout
-- KEYS[3]  the channel, redisson_sc:{name}
-- ARGV[1]  the caller's wall clock in ms
-- Returns  the number of permits leased and not expired (those without a
--          lease included).
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'now', 0, MAX_TIME)
if bad then
    return bad
end
reclaim_expired(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
return redis.call('zcard', KEYS[2])
