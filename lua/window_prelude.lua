-- Shared by every script that writes, prepended to it (before the argument
-- checks): the request's window. The store appends one last ARGV, the time
-- (ms since the epoch, by this server's clock) after which the caller has
-- given up on this request: its round trip's own timeout and a small margin
-- from when it was sent. A request that arrives later (held in a frozen
-- server's socket buffer, delayed by the network) writes nothing and
-- replies with an error the client reads as a failed attempt. '0': none.
-- It is popped, so the script's own ARGV (and #ARGV) are as documented.
-- (Redis 6.2 and later replicate a script's effects, so a write may follow
-- TIME.)
local window_end = table.remove(ARGV)
-- The server's time as the window check read it (nil without a window): a
-- script that needs the time again reads this rather than a second TIME
-- (each redis.call costs the server about half a microsecond).
local window_now
if window_end and window_end ~= '0' then
    window_now = redis.call('time')
    local now = window_now
    -- Well inside the window (a whole second or more before its end, every
    -- call but those of its last second): told by the seconds alone, as
    -- digit strings of one length, which compare as their numbers. No
    -- number is parsed (each string-to-number costs the server about as
    -- much as this whole test).
    local seconds = string.sub(window_end, 1, -4)
    if not (#window_end == 13 and #now[1] == 10 and now[1] < seconds) then
        window_end = tonumber(window_end)
        if not (window_end and window_end > 0) then
            window_now = nil -- not a window: none
        elseif now[1] * 1000 + now[2] / 1000 > window_end then
            return redis.error_reply('ERR late request: arrived after its window ended at '
                .. string.format('%d', window_end) .. ' ms (server clock), nothing written')
        end
    end
end
