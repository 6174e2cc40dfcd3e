-- Withdraw one arrival at a barrier (redisync only) whose waiter gave up
-- (timed out, cancelled, or lost the connection with its outcome unknown),
-- exactly: its own arrival and nothing else, and only while its
-- generation has not completed.
-- KEYS[1]  the barrier (see lua/barrier_arrive.lua)
-- KEYS[2]  the arrival's record, {name}:redisync_op:<op id>
-- ARGV[1]  how long the record (now w, withdrawn) is kept, ms: the
--          arrival, if its request arrives later still, is refused
-- Returns  {1, generation} withdrawn (the generation's count lowered; a
--          generation, or -1, when it had been withdrawn already: a
--          repeat); {2, generation} its generation had completed (the
--          arrival stands: its waiter was released); {0, -1} no arrival
--          was found (none landed, or its record expired after its
--          generation completed); it is now refused if it comes.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'record', 1, MAX_MS)
if bad then
    return bad
end
local first = redis.call('get', KEYS[2])
if first == 'w' then
    return {1, -1}
end
local counted = redis.call('hget', KEYS[1], KEYS[2])
if counted then
    local arrived = tonumber(redis.call('hget', KEYS[1], 'arrived'))
    if not arrived then
        return redis.error_reply('ERR barrier ' .. KEYS[1] .. ' holds a non-integer count')
    end
    redis.call('set', KEYS[2], 'w', 'px', ARGV[1])
    redis.call('hdel', KEYS[1], KEYS[2])
    if arrived <= 1 then
        -- No arrival left: the next one may set other parties.
        redis.call('hdel', KEYS[1], 'parties')
        redis.call('hset', KEYS[1], 'arrived', 0)
    else
        redis.call('hset', KEYS[1], 'arrived', arrived - 1)
    end
    return {1, tonumber(counted)}
end
if first then
    return {2, tonumber(first)}
end
redis.call('set', KEYS[2], 'w', 'px', ARGV[1])
return {0, -1}
