-- Give leased permits a new lease end (Redisson's
-- RPermitExpirableSemaphore.updateLeaseTime), reclaiming expired leases
-- first, so a permit whose lease already ran out is not revived.
-- Loaded after expirable_prelude.lua (reclaim_expired, NON_EXPIRABLE).
-- KEYS[1]  available permits
-- KEYS[2]  leased permits, {name}:timeout
-- KEYS[3]  the channel, redisson_sc:{name}
-- ARGV[1]  the new lease end in ms, or NON_EXPIRABLE
-- ARGV[2]  the caller's wall clock in ms
-- ARGV[3..] the permit ids in hex (1 to 10000; a repeated id counts once)
-- Returns  how many of them were leased and now end at ARGV[1].
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_lease_end(ARGV[1])
    or bad_bounded(ARGV[2], 'now', 0, MAX_TIME)
    or bad_ids(3)
if bad then
    return bad
end
reclaim_expired(KEYS[1], KEYS[2], KEYS[3], ARGV[2])
local updated, seen = 0, {}
for i = 3, #ARGV do
    local id = permit_member(ARGV[i])
    if not seen[id] then
        seen[id] = true
        if redis.call('zscore', KEYS[2], id) ~= false then
            redis.call('zadd', KEYS[2], ARGV[1], id)
            updated = updated + 1
        end
    end
end
return updated
