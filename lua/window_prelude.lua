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
local window_end = tonumber(table.remove(ARGV))
-- The TIME reply the check read (nil without a window): a script that needs
-- the server's clock again reuses it (lua/fair_lock_release.lua).
local window_time
if window_end and window_end > 0 then
    window_time = redis.call('time')
    local now = window_time
    if now[1] * 1000 + now[2] / 1000 > window_end then
        return redis.error_reply('ERR late request: arrived after its window ended at '
            .. string.format('%d', window_end) .. ' ms (server clock), nothing written')
    end
end
