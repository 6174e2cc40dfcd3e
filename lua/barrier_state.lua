-- Read a barrier (redisync only; see lua/barrier_arrive.lua). Writes nothing.
-- KEYS[1]  the barrier
-- KEYS[2]  optional: an arrival's record, {name}:redisync_op:<op id>
-- Returns  {generations completed, arrivals of the current generation,
--          the parties it waits for (0: no arrival yet), 1 when the
--          arrival under KEYS[2] still waits (its field is there: only
--          its generation's completion or its withdrawal removes it),
--          else 0}; -1 for a field that is not an integer
local generation = redis.call('hget', KEYS[1], 'generation') or '0'
local arrived = redis.call('hget', KEYS[1], 'arrived') or '0'
local parties = redis.call('hget', KEYS[1], 'parties') or '0'
local waiting = KEYS[2] and redis.call('hexists', KEYS[1], KEYS[2]) or 0
return {tonumber(generation) or -1, tonumber(arrived) or -1, tonumber(parties) or -1, waiting}
