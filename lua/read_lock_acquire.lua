-- Acquire or re-enter the read half of a read-write lock (Redisson's RReadWriteLock).
-- KEYS[1]  the lock hash: field mode = read|write, <holder> = read hold count,
--          <holder>:write = write hold count
-- KEYS[2]  this holder's timeout key prefix, {name}:<holder>:rwlock_timeout;
--          read hold n lives at <prefix>:<n> with its own expiry
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id, <client uuid>:<thread number>
-- ARGV[3]  the same holder's write field, <holder>:write (a writer may also read)
-- Returns  nil when acquired; otherwise the lock's PTTL in ms.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
if bad then
    return bad
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':1', 1)
    redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local key = KEYS[2] .. ':' .. n
    redis.call('set', key, 1)
    redis.call('pexpire', key, ARGV[1])
    redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
    return nil
end
return redis.call('pttl', KEYS[1])
