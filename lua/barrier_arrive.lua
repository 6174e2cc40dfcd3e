-- Arrive at a barrier (redisync only: Redisson has none). The arrival that
-- makes up the parties completes the generation: every arrival of it is
-- released together, and the next arrivals form the next generation.
-- KEYS[1]  the barrier: a hash with field generation = the generations
--          completed so far (absent = 0), arrived = the arrivals of the
--          current one, parties = how many it waits for, and one field per
--          arrival of it (named by its record, value its generation)
-- KEYS[2]  its channel, redisync_barrier:{name}
-- KEYS[3]  this call's record, {name}:redisync_op:<op id>: the generation
--          it arrived in, or w once withdrawn (lua/barrier_withdraw.lua).
--          A call whose record is there does not arrive again (the same
--          request sent again, its reply lost): it replies as the first
--          did; w = refused as a late request.
-- ARGV[1]  the parties (1 to 2^32 - 1); must match the current
--          generation's while it has arrivals
-- ARGV[2]  how long the record is kept, ms
-- ARGV[3]  the message that opens a generation (0: wakes every waiter)
-- Returns  {generation arrived in, 1 when that generation has completed
--          (this arrival completed it, or it has since), 0 otherwise}
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'parties', 1, 4294967295)
    or bad_bounded(ARGV[2], 'record', 1, MAX_MS)
if bad then
    return bad
end
local generation = tonumber(redis.call('hget', KEYS[1], 'generation') or '0')
local arrived = tonumber(redis.call('hget', KEYS[1], 'arrived') or '0')
if not generation or not arrived then
    return redis.error_reply('ERR barrier ' .. KEYS[1] .. ' holds a non-integer count')
end
local first = redis.call('get', KEYS[3])
if first == 'w' then
    return redis.error_reply('ERR late request: this arrival was withdrawn already')
elseif first then
    local was = tonumber(first)
    return {was, generation > was and 1 or 0}
end
local parties = redis.call('hget', KEYS[1], 'parties')
if arrived > 0 and parties ~= ARGV[1] then
    return redis.error_reply('ERR invalid parties: ' .. ARGV[1] .. ' differs from the '
        .. tostring(parties) .. ' the current generation of ' .. KEYS[1] .. ' waits for')
end
redis.call('set', KEYS[3], generation, 'px', ARGV[2])
if arrived + 1 >= tonumber(ARGV[1]) then
    -- Complete: the arrivals' fields go with it.
    redis.call('del', KEYS[1])
    redis.call('hset', KEYS[1], 'generation', generation + 1, 'arrived', 0)
    redis.call('publish', KEYS[2], ARGV[3])
    return {generation, 1}
end
redis.call('hset', KEYS[1], 'arrived', arrived + 1, 'parties', ARGV[1], KEYS[3], generation)
return {generation, 0}
