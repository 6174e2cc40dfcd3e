-- Read a lock's state in one round trip.
-- KEYS[1]  the lock hash
-- ARGV[1]  holder id
-- Returns  {exists (0/1), the holder's hold count (0 if none), PTTL in ms (-2 absent, -1 no expiry)}.
local count = redis.call('hget', KEYS[1], ARGV[1])
return {redis.call('exists', KEYS[1]), tonumber(count) or 0, redis.call('pttl', KEYS[1])}
