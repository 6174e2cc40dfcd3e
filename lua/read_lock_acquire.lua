-- Acquire or re-enter the read half of a read-write lock (Redisson's RReadWriteLock).
-- KEYS[1]  the lock hash: field mode = read|write, <holder> = read hold count,
--          <holder>:write = write hold count
-- KEYS[2]  this holder's timeout key prefix, {name}:<holder>:rwlock_timeout;
--          read hold n lives at <prefix>:<n> with its own expiry
-- KEYS[3]  optional (redisync only): this attempt's record,
--          {name}:redisync_attempt:<attempt id>, written only when the
--          attempt takes a hold: 'taken:<n>', n the number of the read hold
--          it took, with the lease (or ARGV[4]) as TTL ('undone', by
--          lua/read_lock_undo_acquire.lua; once its hold was released, the
--          release's outcome: lua/read_lock_release.lua keeps it there as
--          the unlock latch). An attempt whose record is there does not act
--          again: 'taken:<n>' and the holder still reads (the request
--          resent) = acquired, no second hold; anything else = refused as a
--          late request.
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id, <client uuid>:<thread number>
-- ARGV[3]  the same holder's write field, <holder>:write (a writer may also read)
-- ARGV[4]  optional (redisync only, with KEYS[3]): how long the record is
--          kept, in ms, when longer than the lease: until every copy of
--          this request is past its window
-- Returns  nil when acquired; otherwise the lock's PTTL in ms.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
    or (ARGV[4] and bad_bounded(ARGV[4], 'record keep time', 1, MAX_MS))
if bad then
    return bad
end
if KEYS[3] then
    local record = redis.call('get', KEYS[3])
    if record then
        if string.sub(record, 1, 6) == 'taken:' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
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
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':1', 1)
    redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    if KEYS[3] then
        redis.call('set', KEYS[3], 'taken:1', 'px', ARGV[4] or ARGV[1])
    end
    return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local key = KEYS[2] .. ':' .. n
    redis.call('set', key, 1)
    redis.call('pexpire', key, ARGV[1])
    redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
    if KEYS[3] then
        redis.call('set', KEYS[3], 'taken:' .. n, 'px', ARGV[4] or ARGV[1])
    end
    return nil
end
-- A busy attempt is spent: a copy of it landing later must not take the
-- lock for a caller told it was busy.
if KEYS[3] then
    redis.call('set', KEYS[3], 'busy', 'px', ARGV[4] or ARGV[1], 'nx')
end
return redis.call('pttl', KEYS[1])
