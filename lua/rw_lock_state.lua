-- Read a read-write lock's state in one round trip.
-- KEYS[1]  the lock hash
-- ARGV[1]  the asking holder's field (<holder> for read, <holder>:write for write)
-- Returns  {mode (read|write|''), the field's hold count (0 if none), PTTL in ms}.
local mode = redis.call('hget', KEYS[1], 'mode')
local count = redis.call('hget', KEYS[1], ARGV[1])
return {mode or '', tonumber(count) or 0, redis.call('pttl', KEYS[1])}
