-- Read a barrier (redisync only; see lua/barrier_arrive.lua). Writes nothing.
-- KEYS[1]  the barrier
-- Returns  {generations completed, arrivals of the current generation,
--          the parties it waits for (0: no arrival yet)}
local generation = redis.call('hget', KEYS[1], 'generation') or '0'
local arrived = redis.call('hget', KEYS[1], 'arrived') or '0'
local parties = redis.call('hget', KEYS[1], 'parties') or '0'
return {tonumber(generation) or -1, tonumber(arrived) or -1, tonumber(parties) or -1}
