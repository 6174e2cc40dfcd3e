-- A leader resigns its term (redisync only): the leader record goes and
-- the channel says so, before the election's lock is released (by the
-- fair lock's release, which hands it to the next candidate). Loaded after
-- window_prelude, args_prelude and op_record_prelude.
-- KEYS[1]  the leader record, {name}:redisync_leader
-- KEYS[2]  the channel, redisync_election:{name}
-- KEYS[3]  the call's op record (see lua/op_record_prelude.lua)
-- ARGV[1]  the leader's holder id
-- ARGV[2]  its term
-- ARGV[3]  the op record's keep time, ms
-- Returns  1 when the record was that term's (deleted, 'r:<term>'
--          published); 0 when it names another term or holder (a later
--          leader's: untouched) or is gone.
local replay = op_replay(2)
if replay ~= nil then
    return replay
end
if redis.call('hget', KEYS[1], 'holder') ~= ARGV[1]
    or redis.call('hget', KEYS[1], 'term') ~= ARGV[2] then
    return op_keep(0)
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], 'r:' .. ARGV[2])
return op_keep(1)
