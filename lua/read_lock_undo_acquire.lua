-- Undo exactly one read acquire attempt whose outcome is unknown (its request
-- left, no reply came), and nothing else: not a hold another thread of the
-- same holder, or a retry, took meanwhile.
-- KEYS[1]  the lock hash
-- KEYS[2]  the channel, redisson_rwlock:{name}
-- KEYS[3]  this holder's timeout key prefix, {name}:<holder>:rwlock_timeout
-- KEYS[4]  the key prefix of every holder's timeout keys, {name}
-- KEYS[5]  the attempt's record, {name}:redisync_attempt:<attempt id>:
--          'taken:<n>', n the number of the read hold it took (see
--          lua/read_lock_acquire.lua)
-- ARGV[1]  the unlock message (0)
-- ARGV[2]  holder id
-- ARGV[3]  how long the record (now 'undone') is kept, in ms, so that the
--          attempt, if it arrives later still, is refused: past every
--          copy's window
-- ARGV[4]  optional: 1 = forget the record instead of marking it undone
--          (a replica-acknowledgement rollback, resent at once)
-- The structure is left as a release of that hold leaves it: the holder's
-- count one lower (its field gone at 0), its timeout keys numbered 1..count
-- (hold n's key goes: the top hold's expiry moves into slot n, so every
-- remaining hold keeps its own), the hash living as long as its longest
-- remaining hold, and the lock deleted and the unlock published when
-- nothing holds it any more.
-- Returns  0 = the attempt took no hold (or it has expired): nothing to
--          undo, and it never will; 1 = its hold removed, the lock still
--          held; 2 = its hold removed, the lock released and the unlock
--          published. Idempotent: a repeat returns 0.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[3], 'lease', 1, MAX_MS)
if bad then
    return bad
end
local record = take_record(KEYS[5], 'undone', ARGV[3], ARGV[4])
if not record or string.sub(record, 1, 6) ~= 'taken:' then
    return 0
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return 0
end
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if counter == 0 then
    redis.call('hdel', KEYS[1], ARGV[2])
end
local top = KEYS[3] .. ':' .. (counter + 1)
local n = tonumber(string.sub(record, 7))
if n and n >= 1 and n <= counter then
    local ttl = redis.call('pttl', top)
    if ttl > 0 then
        redis.call('set', KEYS[3] .. ':' .. string.format('%d', n), 1, 'px', ttl)
    end
end
redis.call('del', top)
if settle_read_lock(KEYS[1], KEYS[2], KEYS[4], mode, ARGV[1]) then
    return 1
end
return 2
