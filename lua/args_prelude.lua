-- Shared by every script that takes a number in ARGV, prepended to it when
-- it is loaded. A runtime error in a script does not undo the writes that
-- ran before it, so each script checks its arguments with these before its
-- first write and replies with an error instead of half-running.
--
-- The limits match redisync's (src/error.rs): a duration is 1 to 2^47 ms
-- (MAX_LEASE, about 4459 years; Redis refuses an expiry once its clock plus
-- the value passes 2^63 ms, and Lua numbers are exact only below 2^53); an
-- absolute time is 0 to 2^48 ms since the epoch; a count is a 64-bit integer.

-- Every `local function` here is a new closure on every run of the script
-- (Redis runs a script's whole text per call; cheap but not free: about
-- 15 ns each on Redis 7, measured by EVALSHA's usec_per_call, where one
-- redis.call costs 300-500 ns), so the lock scripts tell their usual
-- durations good with one pattern over all of them, inline, and call
-- bad_bounded only for the exact verdict (lua/lock_acquire.lua); the exact
-- 64-bit comparisons that counts need are in lua/count_prelude.lua, which
-- only the scripts that take counts start with.

-- nil when value is a plain decimal integer string (as Redis writes one)
-- from low to high;
-- otherwise an error reply naming what. For bounds below 10^15 only
-- (durations, clock readings): every accepted value then has at most 15
-- digits, and such a number is exact as a Lua double.
local function bad_bounded(value, what, low, high)
    -- No sign, no leading zero: what Redis itself parses as an integer.
    local n = type(value) == 'string' and #value <= 15
        and (value == '0' or string.find(value, '^[1-9]%d*$')) and tonumber(value)
    if n and n >= low and n <= high then
        return nil
    end
    return redis.error_reply('ERR invalid ' .. what .. ': ' .. tostring(value)
        .. ' is not an integer from ' .. string.format('%d', low) .. ' to '
        .. string.format('%d', high))
end

-- The bounds scripts pass to bad_bounded: a duration in ms (1 to 2^47)
-- and an absolute time in ms since the epoch (0 to 2^48). Constants, not
-- wrapper functions: each function is one more closure per call.
local MAX_MS = 140737488355328
local MAX_TIME = 281474976710656
