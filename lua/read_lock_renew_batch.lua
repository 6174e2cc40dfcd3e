-- Renew many holders' read holds in one round trip (the watchdog's call):
-- for each, as read_lock_renew.lua does for one.
-- KEYS[2i-1] a read-write lock hash (on a cluster, all keys in one slot)
-- KEYS[2i]   that holder's timeout key prefix, {name}:<holder>:rwlock_timeout
-- KEYS[2n+i] optional (redisync only, n = the number of pairs): the record
--            of the acquire attempt whose read hold the i-th pair is renewed
--            for, as KEYS[4] of lua/read_lock_renew.lua; KEYS[2i-1] itself
--            = none for that pair (the holder check alone).
-- ARGV[1]    lease in milliseconds
-- ARGV[i+1]  the holder id of the i-th pair
-- Returns    an array: item i is 1 when the i-th holder's read holds were
--            renewed, 0 when it holds no read hold (or none by that
--            attempt).
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
if bad then
    return bad
end
local n = #ARGV - 1
local records = #KEYS == 3 * n
if not records and #KEYS ~= 2 * n then
    return redis.error_reply('ERR invalid holders: ' .. n
        .. ' holder ids for ' .. #KEYS .. ' keys (two per read hold, or three with'
        .. ' its record)')
end
local lease = tonumber(ARGV[1])
local renewed = {}
for i = 1, n do
    local name = KEYS[2 * i - 1]
    local holds = redis.call('hget', name, ARGV[i + 1])
    local record = records and KEYS[2 * n + i] ~= name and KEYS[2 * n + i]
    if holds ~= false and record and not record_taken(redis.call('get', record), 'n') then
        holds = false
    end
    if holds == false then
        renewed[i] = 0
    else
        -- At least the lease, never shorter than it is (the acquire's may
        -- be); ARGV[1] as sent (a Lua number costs a conversion).
        if record and redis.call('pttl', record) < lease then
            redis.call('pexpire', record, ARGV[1])
        end
        for h = tonumber(holds), 1, -1 do
            redis.call('pexpire', KEYS[2 * i] .. ':' .. h, ARGV[1])
        end
        redis.call('pexpire', name, math.max(redis.call('pttl', name), lease))
        renewed[i] = 1
    end
end
return renewed
