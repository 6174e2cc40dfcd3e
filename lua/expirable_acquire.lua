-- Take one permit with a lease from a permit-expirable semaphore
-- (Redisson's RPermitExpirableSemaphore).
-- Loaded after expirable_prelude.lua (reclaim_expired).
-- KEYS[1]  available permits: a string holding an integer
-- KEYS[2]  leased permits: zset of permit id -> lease end (ms, client clock), {name}:timeout
-- KEYS[3]  the channel, redisson_sc:{name}
-- ARGV[1]  the new permit's id
-- ARGV[2]  its lease end in ms
-- ARGV[3]  the caller's wall clock in ms
-- Returns  nil when taken (the id is recorded with its lease end); otherwise
--          ms until the earliest lease ends (-1 when no permit is leased).
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[2], 'lease end', 0, MAX_TIME)
    or bad_bounded(ARGV[3], 'now', 0, MAX_TIME)
if bad then
    return bad
end
reclaim_expired(KEYS[1], KEYS[2], KEYS[3], ARGV[3])
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= 1 then
    redis.call('decr', KEYS[1])
    redis.call('zadd', KEYS[2], ARGV[2], ARGV[1])
    return nil
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if first[1] == nil then
    return -1
end
return math.max(tonumber(first[2]) - tonumber(ARGV[3]), 1)
