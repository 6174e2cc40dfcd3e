-- An election's current leader and its recent terms (redisync only);
-- writes nothing.
-- KEYS[1]  the election's lock, {name}:redisync_election
-- KEYS[2]  the leader record, {name}:redisync_leader
-- KEYS[3]  the recent terms, {name}:redisync_terms
-- ARGV[1]  optional: return the recent terms too
-- Returns  {identity, term, since, lease ms left} of the leader whose
--          record names a holder that still holds the lock ({} when there
--          is none), then, with ARGV[1], every recent term as
--          '<term>:<since>:<identity>', oldest first.
local out = {}
local holder = redis.call('hget', KEYS[2], 'holder')
if holder and redis.call('hexists', KEYS[1], holder) == 1 then
    out = {redis.call('hget', KEYS[2], 'identity'), redis.call('hget', KEYS[2], 'term'),
        redis.call('hget', KEYS[2], 'since'), redis.call('pttl', KEYS[1])}
end
if ARGV[1] then
    local recent = redis.call('lrange', KEYS[3], 0, -1)
    local result = {out}
    for i = 1, #recent do
        result[#result + 1] = recent[i]
    end
    return result
end
return out
