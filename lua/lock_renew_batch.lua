-- Renew many held locks' leases in one round trip (the watchdog's call,
-- Redisson's batched renewal): each lock whose holder still holds it gets
-- the lease again; the others are left alone.
-- KEYS[i]    a lock hash (on a cluster, all keys in one hash slot)
-- KEYS[n+i]  optional (redisync only, n = the number of locks, at least 2):
--            the record of the acquire attempt whose hold KEYS[i] is renewed
--            for, {name}:redisync_attempt:<attempt id>, as KEYS[2] of
--            lua/lock_renew.lua (renewed only while the record says taken;
--            its TTL made at least the lease); KEYS[i] itself = none for
--            that lock (the holder check alone).
-- ARGV[1]    lease in milliseconds
-- ARGV[i+1]  the holder id (hash field) of KEYS[i]
-- ARGV[n+2]  with the records: how they say taken, 'taken' or 'n' (as
--            ARGV[3] of lua/lock_renew.lua)
-- Returns    an array: item i is 1 when KEYS[i] was renewed, 0 when its
--            holder no longer holds it (or no longer by that attempt).
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
if bad then
    return bad
end
local n = #ARGV - 1
local kind
if #KEYS ~= n then
    n = #ARGV - 2
    kind = ARGV[#ARGV]
    if n < 2 or #KEYS ~= 2 * n then
        return redis.error_reply('ERR invalid holders: ' .. (#ARGV - 1)
            .. ' arguments after the lease for ' .. #KEYS .. ' keys (a holder id per'
            .. ' lock, or with a record per lock a holder id per lock and the record kind)')
    end
    if kind ~= 'taken' and kind ~= 'n' then
        return redis.error_reply('ERR invalid record kind: ' .. tostring(kind)
            .. " (expected 'taken' or 'n')")
    end
end
local lease = tonumber(ARGV[1])
local renewed = {}
for i = 1, n do
    local held = redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1
    local record = kind and KEYS[n + i] ~= KEYS[i] and KEYS[n + i]
    if held and record then
        held = record_taken(redis.call('get', record), kind)
        -- At least the lease, never shorter than it is (the acquire's may
        -- be); ARGV[1] as sent (a Lua number costs a conversion).
        if held and redis.call('pttl', record) < lease then
            redis.call('pexpire', record, ARGV[1])
        end
    end
    if held then
        redis.call('pexpire', KEYS[i], ARGV[1])
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
