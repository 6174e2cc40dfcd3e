-- Take permits with a lease from a permit-expirable semaphore
-- (Redisson's RPermitExpirableSemaphore.tryAcquire(permits, ...)): all of
-- them or none.
-- Loaded after expirable_prelude.lua (reclaim_expired, NON_EXPIRABLE).
-- KEYS[1]  available permits: a string holding an integer
-- KEYS[2]  leased permits: zset of permit id -> lease end (ms, client clock), {name}:timeout
-- KEYS[3]  the channel, redisson_sc:{name}
-- KEYS[4]  optional (redisync only): this attempt's record,
--          {name}:redisync_op:<op id>: 1 = it took the permits, 0 = it
--          found too few, u = undone (lua/expirable_undo_acquire.lua). An
--          attempt whose record is there does not act again: sent again
--          (its reply lost, or a copy delayed in the network) it replies
--          with its first outcome (-1 for "too few"); undone, it is
--          refused as a late request.
-- ARGV[1]  the lease end in ms, or NON_EXPIRABLE (held until released)
-- ARGV[2]  the caller's wall clock in ms
-- ARGV[3]  with KEYS[4]: how long the record is kept, ms
-- ARGV[3..] (ARGV[4..] with KEYS[4]) the new permits' ids, one per permit
--          (1 to 10000), in hex; the zset holds their bytes, as Redisson's
-- Returns  nil when taken (each id recorded with the lease end); without a
--          record, also when the first id is leased already: the same call
--          sent again (ids are fresh per call) takes nothing more;
--          otherwise ms until the earliest lease ends (-1 when no permit is
--          leased or the earliest never expires: only a release frees one).
-- Checked before any write (a script error does not undo earlier writes).
local first = KEYS[4] and 4 or 3
local bad = bad_lease_end(ARGV[1])
    or bad_bounded(ARGV[2], 'now', 0, MAX_TIME)
    or (KEYS[4] and bad_bounded(ARGV[3], 'record', 1, MAX_MS))
    or bad_ids(first)
if bad then
    return bad
end
if KEYS[4] then
    local outcome = redis.call('get', KEYS[4])
    if outcome == '1' then
        return nil
    elseif outcome == '0' then
        return -1
    elseif outcome then
        return redis.error_reply('ERR late request: this acquire was undone already')
    end
elseif redis.call('zscore', KEYS[2], permit_member(ARGV[first])) then
    return nil
end
reclaim_expired(KEYS[1], KEYS[2], KEYS[3], ARGV[2])
local wanted = #ARGV - first + 1
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= wanted then
    redis.call('decrby', KEYS[1], wanted)
    for i = first, #ARGV do
        redis.call('zadd', KEYS[2], ARGV[1], permit_member(ARGV[i]))
    end
    -- As Redisson: the leases live as long as the semaphore, if it expires.
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    if KEYS[4] then
        redis.call('set', KEYS[4], 1, 'px', ARGV[3])
    end
    return nil
end
if KEYS[4] then
    redis.call('set', KEYS[4], 0, 'px', ARGV[3])
end
local first_lease = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if first_lease[1] == nil or tonumber(first_lease[2]) >= tonumber(NON_EXPIRABLE) then
    return -1
end
return math.max(tonumber(first_lease[2]) - tonumber(ARGV[2]), 1)
