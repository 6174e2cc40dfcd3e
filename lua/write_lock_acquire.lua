-- Acquire or re-enter the write half of a read-write lock.
-- KEYS[1]  the lock hash (see read_lock_acquire.lua)
-- KEYS[2]  optional (redisync only): this attempt's record,
--          {name}:redisync_attempt:<attempt id>, written only when the
--          attempt takes a hold: 'taken' with the lease (or ARGV[4]) as TTL
--          ('undone', by lua/write_lock_undo_acquire.lua; once its hold was
--          released, the release's outcome: lua/write_lock_release.lua keeps
--          it there as the unlock latch). An attempt whose record is there
--          does not act again: 'taken' and the holder still writes (the
--          request resent) = acquired, no second hold; anything else =
--          refused as a late request.
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  the holder's write field, <client uuid>:<thread number>:write
-- ARGV[3]  the holder's read field, <client uuid>:<thread number>
-- ARGV[4]  optional (redisync only, with KEYS[2]): how long the record is
--          kept, in ms, when longer than the lease: until every copy of
--          this request is past its window
-- Returns  nil when acquired (re-entry adds the lease to the remaining TTL, as
--          Redisson does, up to 2^47 ms); -3 when the caller holds the read half (read -> write
--          cannot be granted: waiting would wait for itself); otherwise the PTTL.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
    or (ARGV[4] and bad_bounded(ARGV[4], 'record keep time', 1, MAX_MS))
if bad then
    return bad
end
if KEYS[2] then
    local record = redis.call('get', KEYS[2])
    if record then
        if record == 'taken' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
            return nil
        end
        if record == 'busy' then
            -- Another copy of this attempt was told busy: spent.
            return math.max(redis.call('pttl', KEYS[1]), 1)
        end
        return redis.error_reply('ERR late request: this acquire attempt was undone or released already')
    end
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if KEYS[2] then
        redis.call('set', KEYS[2], 'taken', 'px', ARGV[4] or ARGV[1])
    end
    return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    -- Capped at the longest lease, so repeated reentry never sums past
    -- what PEXPIRE accepts (an error after the HINCRBY would keep the hold).
    local ttl = math.min(redis.call('pttl', KEYS[1]) + tonumber(ARGV[1]), 140737488355328)
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ttl)
    if KEYS[2] then
        redis.call('set', KEYS[2], 'taken', 'px', ARGV[4] or ARGV[1])
    end
    return nil
end
if mode == 'read' and redis.call('hexists', KEYS[1], ARGV[3]) == 1 then
    return -3
end
-- A busy attempt is spent: a copy of it landing later must not take the
-- lock for a caller told it was busy.
if KEYS[2] then
    redis.call('set', KEYS[2], 'busy', 'px', ARGV[4] or ARGV[1], 'nx')
end
return redis.call('pttl', KEYS[1])
