-- Undo exactly one acquire call of a permit-expirable semaphore whose
-- outcome is unknown (its request left, no reply came): return its permits
-- if it leased them, and mark it undone so that it is refused if it
-- arrives later still (see lua/expirable_acquire.lua).
-- Loaded after expirable_prelude.lua (reclaim_expired, return_leased).
-- KEYS[1]  available permits
-- KEYS[2]  leased permits, {name}:timeout
-- KEYS[3]  the channel, redisson_sc:{name}
-- KEYS[4]  the call's record, {name}:redisync_op:<op id>
-- ARGV[1]  the caller's wall clock in ms
-- ARGV[2]  how long the record (u, undone) is kept, ms
-- ARGV[3..] the call's permit ids in hex (1 to 10000)
-- Returns  how many of them were leased and are now returned.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'now', 0, MAX_TIME)
    or bad_bounded(ARGV[2], 'record', 1, MAX_MS)
    or bad_ids(3)
if bad then
    return bad
end
redis.call('set', KEYS[4], 'u', 'px', ARGV[2])
local returned = return_leased(KEYS[1], KEYS[2], KEYS[3], ARGV[1], 3)
reclaim_expired(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
return returned
