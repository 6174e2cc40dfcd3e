-- Renew a held lock's lease (the watchdog's call, LockGuard::extend).
-- KEYS[1]  the lock hash
-- KEYS[2]  optional (redisync only): the record of the acquire attempt
--          whose hold this renews, {name}:redisync_attempt:<attempt id>.
--          Renewed only while that record says the hold is taken (see
--          ARGV[3]): a released hold's record holds its release's outcome
--          (or is gone), so a renewal sent for it, resent or held up on the
--          way, renews nothing, not even the same holder's next hold. The
--          record's TTL is made at least the lease, so that it lives as
--          long as the hold it vouches for. Without KEYS[2] (Redisson's
--          call, a hold handed over by another client's release): the
--          holder check alone.
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id
-- ARGV[3]  with KEYS[2]: how the record says taken, as the kind's acquire
--          reads it: 'taken' or 'n', read alike (lua/renew_prelude.lua):
--          every kind's record begins with 'taken' while its hold lives.
--          Without KEYS[2] and with ARGV[4]: '-'.
-- ARGV[4]  optional (redisync only): 'raise' = never shorten: the TTL is
--          set only when the lease is longer than what is left (a fixed
--          lease passed between threads of one client, restarted for its
--          new holder by the watchdog after the pass: a copy of an earlier
--          holder's call may land after a later holder's, and must not cut
--          the later holder's lease).
-- Returns  1 when renewed; 0 when the holder no longer holds it (or no
--          longer holds it by that attempt).
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
if bad then
    return bad
end
if KEYS[2] and ARGV[3] ~= 'taken' and ARGV[3] ~= 'n' then
    return redis.error_reply('ERR invalid record kind: ' .. tostring(ARGV[3])
        .. " (expected 'taken' or 'n')")
end
if ARGV[4] and ARGV[4] ~= 'raise' then
    return redis.error_reply('ERR invalid renew mode: ' .. tostring(ARGV[4])
        .. " (expected 'raise' or none)")
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return 0
end
if KEYS[2] then
    local record = redis.call('get', KEYS[2])
    if not record_taken(record, ARGV[3]) then
        return 0
    end
    -- At least the lease, never shorter than it is (the acquire's may be).
    if redis.call('pttl', KEYS[2]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[2], ARGV[1])
    end
end
if ARGV[4] and redis.call('pttl', KEYS[1]) >= tonumber(ARGV[1]) then
    return 1
end
redis.call('pexpire', KEYS[1], ARGV[1])
return 1
