-- Renew many held locks' leases in one round trip (the watchdog's call,
-- Redisson's batched renewal): each lock whose holder still holds it gets
-- the lease again; the others are left alone.
-- KEYS[i]    a lock hash (on a cluster, all in one hash slot)
-- ARGV[1]    lease in milliseconds
-- ARGV[i+1]  the holder id (hash field) of KEYS[i]
-- Returns    an array: item i is 1 when KEYS[i] was renewed, 0 when its
--            holder no longer holds it.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
if bad then
    return bad
end
if #ARGV ~= #KEYS + 1 then
    return redis.error_reply('ERR invalid holders: ' .. (#ARGV - 1)
        .. ' holder ids for ' .. #KEYS .. ' locks')
end
local renewed = {}
for i = 1, #KEYS do
    if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
        redis.call('pexpire', KEYS[i], ARGV[1])
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
