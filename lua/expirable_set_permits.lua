-- Set a permit-expirable semaphore's total permits, leased ones included
-- (Redisson's RPermitExpirableSemaphore.setPermits): available becomes
-- the total minus the permits leased now (it may go negative: leased
-- permits are not revoked, and the pool refills as they come back).
-- Absent, it is set to the total as is (as Redisson does).
-- Loaded after args_prelude.lua, op_record_prelude.lua and
-- expirable_prelude.lua (reclaim_expired).
-- KEYS[1]  available permits
-- KEYS[2]  leased permits, {name}:timeout
-- KEYS[3]  the channel, redisson_sc:{name}
-- KEYS[4]  optional (redisync only): this call's record,
--          {name}:redisync_op:<op id> (see op_record_prelude.lua): a copy
--          of a call that already acted returns its first outcome and
--          writes nothing; one settled as not done replies
--          `ERR late request` and writes nothing.
-- ARGV[1]  the total (0 to 2^63 - 1)
-- ARGV[2]  the caller's wall clock in ms
-- ARGV[3]  with the record: how long it is kept, ms
-- Returns  the available permits after the change; when positive, the
--          count is published (it wakes up to that many waiters).
-- Checked before any write (a script error does not undo earlier writes).
local bad_integer = count_checks()
local bad = bad_integer(ARGV[1], 'permits', '0', '9223372036854775807')
    or bad_bounded(ARGV[2], 'now', 0, MAX_TIME)
if bad then
    return bad
end
local replay = op_replay(2)
if replay ~= nil then
    return replay
end
-- Types first (WRONGTYPE before any write).
redis.call('zcard', KEYS[2])
local current = redis.call('get', KEYS[1])
if current ~= false and not string.match(current, '^-?%d+$') then
    return redis.error_reply('ERR value is not an integer or out of range')
end
reclaim_expired(KEYS[1], KEYS[2], KEYS[3], ARGV[2])
local value
if current == false then
    redis.call('set', KEYS[1], ARGV[1])
    value = redis.call('get', KEYS[1])
else
    -- Exact 64-bit arithmetic by Redis itself, keeping the key's TTL:
    -- to 0, plus the total, minus the leased.
    redis.call('decrby', KEYS[1], redis.call('get', KEYS[1]))
    redis.call('incrby', KEYS[1], ARGV[1])
    value = redis.call('decrby', KEYS[1], redis.call('zcard', KEYS[2]))
end
if tonumber(value) > 0 then
    redis.call('publish', KEYS[3], value)
end
return op_keep(value)
