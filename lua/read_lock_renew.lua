-- Renew a holder's read holds (the watchdog's call). Only this holder's
-- timeout keys are renewed, so a dead reader's holds still expire.
-- KEYS[1]  the lock hash
-- KEYS[2]  this holder's timeout key prefix, {name}:<holder>:rwlock_timeout
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id
-- Returns  1 when renewed; 0 when the holder holds no read hold.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
if bad then
    return bad
end
local holds = redis.call('hget', KEYS[1], ARGV[2])
if holds == false then
    return 0
end
for i = tonumber(holds), 1, -1 do
    redis.call('pexpire', KEYS[2] .. ':' .. i, ARGV[1])
end
redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
return 1
