-- Renew a holder's read holds (LockGuard::extend; the watchdog renews in
-- batches). Only this holder's timeout keys are renewed, so a dead reader's
-- holds still expire.
-- KEYS[1]  the lock hash
-- KEYS[2]  this holder's timeout key prefix, {name}:<holder>:rwlock_timeout
-- KEYS[3]  the prefix of every holder's timeout keys, {name}
-- KEYS[4]  optional (redisync only): the record of the acquire attempt
--          whose read hold this renews, {name}:redisync_attempt:<attempt
--          id>: renewed only while it says taken (any value but '0', the
--          hold's number; a released hold's record is gone or holds its
--          release's outcome), and its TTL made at least the lease; as
--          KEYS[2] of lua/lock_renew.lua.
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id
-- Returns  1 when renewed; 0 when the holder holds no live read hold (none
--          counted, or every one's timeout key already expired: the hash
--          may outlive a hold, as long as another reader's lease), or no
--          longer by that attempt.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
if bad then
    return bad
end
local holds = redis.call('hget', KEYS[1], ARGV[2])
if holds == false then
    return 0
end
if KEYS[4] then
    if not record_taken(redis.call('get', KEYS[4]), 'n') then
        return 0
    end
end
local renewed = 0
for i = tonumber(holds), 1, -1 do
    renewed = renewed + redis.call('pexpire', KEYS[2] .. ':' .. i, ARGV[1])
end
if renewed == 0 then
    return 0
end
if KEYS[4] then
    -- At least the lease, never shorter than it is (the acquire's may be).
    if redis.call('pttl', KEYS[4]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[4], ARGV[1])
    end
end
if redis.call('hget', KEYS[1], 'mode') == 'write' then
    -- Downgraded: the hash is also the write hold's, whose lease stays.
    redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
    return 1
end
-- The lock lives as long as its longest read hold (this one's may have
-- been shortened), as the read release computes it.
local longest = tonumber(ARGV[1])
for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
    local count = tonumber(redis.call('hget', KEYS[1], field))
    if field ~= ARGV[2] and type(count) == 'number' then
        for i = count, 1, -1 do
            local ttl = redis.call('pttl', KEYS[3] .. ':' .. field .. ':rwlock_timeout:' .. i)
            longest = math.max(ttl, longest)
        end
    end
end
redis.call('pexpire', KEYS[1], longest)
return 1
