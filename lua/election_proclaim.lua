-- Proclaim the holder of an election's lock its leader, with a new term
-- (redisync only). Loaded after window_prelude, args_prelude and
-- op_record_prelude (the call acts once by its op record).
-- KEYS[1]  the election's lock: a fair lock hash, {name}:redisync_election
-- KEYS[2]  the term counter, {name}:redisync_term (never expires)
-- KEYS[3]  the leader record, {name}:redisync_leader: a hash of holder,
--          identity, term, since (server ms)
-- KEYS[4]  the recent terms, {name}:redisync_terms: a list of
--          '<term>:<since>:<identity>', the last 64
-- KEYS[5]  the channel, redisync_election:{name}
-- KEYS[6]  the call's op record (see lua/op_record_prelude.lua)
-- ARGV[1]  the holder id of the lock's hold
-- ARGV[2]  the leader's identity (any text)
-- ARGV[3]  the lease, ms: the lock's TTL is set to it (a hold handed over
--          by a release starts with the claim window as TTL; the leader's
--          lease must run from its proclamation)
-- ARGV[4]  the op record's keep time, ms
-- Returns  the term, as a string of digits, when proclaimed; nil when the
--          holder does not hold the lock (its hold ran out). Publishes
--          'e:<term>:<since>:<identity>' on the channel.
--
-- The term is the counter's INCR raised to at least the server's clock in
-- microseconds, as a fenced lock's token: it exceeds every earlier term,
-- also after the counter was lost with the data (a restart without
-- persistence, a failover) as long as the answering server's clock is
-- later than the old one's was.
if redis.replicate_commands ~= nil then
    redis.replicate_commands()
end
local bad = bad_bounded(ARGV[3], 'lease', 1, MAX_MS)
if bad then
    return bad
end
local replay = op_replay(3)
if replay ~= nil then
    return replay
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return op_keep(nil)
end
redis.call('pexpire', KEYS[1], ARGV[3])
local term = redis.call('incr', KEYS[2])
local time = window_now or redis.call('time')
local floor = tonumber(time[1]) * 1000000 + tonumber(time[2])
if term < floor then
    redis.call('set', KEYS[2], string.format('%.0f', floor))
end
local taken = redis.call('get', KEYS[2])
local since = string.format('%d', tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000))
redis.call('hset', KEYS[3], 'holder', ARGV[1], 'identity', ARGV[2], 'term', taken,
    'since', since)
-- The last 64 (RPUSH answers the length; one over at most).
if redis.call('rpush', KEYS[4], taken .. ':' .. since .. ':' .. ARGV[2]) > 64 then
    redis.call('lpop', KEYS[4])
end
redis.call('publish', KEYS[5], 'e:' .. taken .. ':' .. since .. ':' .. ARGV[2])
return op_keep(taken)
