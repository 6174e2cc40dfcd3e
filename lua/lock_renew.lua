-- Renew a held lock's lease (the watchdog's call).
-- KEYS[1]  the lock hash
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id
-- Returns  1 when renewed; 0 when the holder no longer holds it.
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
if bad then
    return bad
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    return 1
end
return 0
