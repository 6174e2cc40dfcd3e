-- Undo exactly one write acquire attempt whose outcome is unknown (its
-- request left, no reply came), and nothing else: not a hold another thread
-- of the same holder, or a retry, took meanwhile.
-- KEYS[1]  the lock hash
-- KEYS[2]  the channel, redisson_rwlock:{name}
-- KEYS[3]  the attempt's record, {name}:redisync_attempt:<attempt id>
--          (see lua/write_lock_acquire.lua)
-- ARGV[1]  the read-unlock message (1: wakes every waiter)
-- ARGV[2]  the holder's write field, <holder>:write
-- ARGV[3]  how long the record (now 'undone') is kept, in ms, so that the
--          attempt, if it arrives later still, is refused: past every
--          copy's window
-- ARGV[4]  optional: 1 = forget the record instead of marking it undone
--          (a replica-acknowledgement rollback, resent at once)
-- As a release of that hold: the write count one lower; on the last write
-- hold the lock is deleted (or left in read mode to the holder's own read
-- holds) and the read-unlock published. The TTL of a lock still held is
-- left as it is (never shortened under the holds that remain).
-- Returns  0 = the attempt took no hold (or it has expired): nothing to
--          undo, and it never will; 1 = its hold removed, other write holds
--          remain; 2 = its hold removed, the write lock released and the
--          read-unlock published. Idempotent: a repeat returns 0.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[3], 'lease', 1, MAX_MS)
if bad then
    return bad
end
local record = take_record(KEYS[3], 'undone', ARGV[3], ARGV[4])
if record ~= 'taken' then
    return 0
end
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return 0
end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
    return 1
end
drop_write_lock(KEYS[1], KEYS[2], ARGV[2], ARGV[1])
return 2
