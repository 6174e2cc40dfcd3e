-- Renew many holders' read holds in one round trip (the watchdog's call):
-- for each, as read_lock_renew.lua does for one.
-- KEYS[2i-1] a read-write lock hash (on a cluster, all keys in one slot)
-- KEYS[2i]   that holder's timeout key prefix, {name}:<holder>:rwlock_timeout
-- ARGV[1]    lease in milliseconds
-- ARGV[i+1]  the holder id of the i-th pair
-- Returns    an array: item i is 1 when the i-th holder's read holds were
--            renewed, 0 when it holds no read hold.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
if bad then
    return bad
end
if #KEYS % 2 ~= 0 or #ARGV ~= #KEYS / 2 + 1 then
    return redis.error_reply('ERR invalid holders: ' .. (#ARGV - 1)
        .. ' holder ids for ' .. #KEYS .. ' keys (two per read hold)')
end
local lease = tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS / 2 do
    local name = KEYS[2 * i - 1]
    local holds = redis.call('hget', name, ARGV[i + 1])
    if holds == false then
        renewed[i] = 0
    else
        for n = tonumber(holds), 1, -1 do
            redis.call('pexpire', KEYS[2 * i] .. ':' .. n, ARGV[1])
        end
        redis.call('pexpire', name, math.max(redis.call('pttl', name), lease))
        renewed[i] = 1
    end
end
return renewed
