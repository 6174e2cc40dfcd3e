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
-- redis.call costs 300-500 ns), so the lock scripts' path holds one small
-- check; the exact 64-bit comparisons that counts need are built only by
-- the scripts that call `count_checks()`.

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

-- Whether value is a duration that bad_bounded(value, what, 1, MAX_MS)
-- accepts, told without parsing a number (each string-to-number is a
-- strtod, about as costly to the server as a small redis.call's own work):
-- 1 to 14 digits, no leading zero, so below 10^14 < 2^47. The hot scripts
-- ask this first and bad_bounded only when it says false (a longer value,
-- or a bad one: the exact verdict and its message).
local function plain_ms(value)
    return type(value) == 'string' and #value <= 14 and string.find(value, '^[1-9]%d*$') ~= nil
end

-- The bounds scripts pass to bad_bounded: a duration in ms (1 to 2^47)
-- and an absolute time in ms since the epoch (0 to 2^48). Constants, not
-- wrapper functions: each function is one more closure per call.
local MAX_MS = 140737488355328
local MAX_TIME = 281474976710656

-- The exact checks of 64-bit counts: returns bad_integer(value, what, low,
-- high), with low and high as digit strings, bad_count(value, what) and
-- integer_below(a, b).
local function count_checks()
    -- Whether decimal integer string a is below b, exactly (tonumber is not
    -- beyond 2^53). Both must match ^-?%d+$.
    local function integer_below(a, b)
        local negative_a, negative_b = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
        local digits_a = string.gsub(a, '^-?0*', '')
        local digits_b = string.gsub(b, '^-?0*', '')
        if digits_a == '' and digits_b == '' then
            return false -- 0 and -0
        end
        if negative_a ~= negative_b then
            return negative_a
        end
        if digits_a == digits_b then
            return false
        end
        local smaller
        if #digits_a ~= #digits_b then
            smaller = #digits_a < #digits_b
        else
            smaller = digits_a < digits_b
        end
        if negative_a then
            return not smaller
        end
        return smaller
    end

    -- nil when value is a decimal integer string from low to high (both given
    -- as digit strings, compared exactly); otherwise an error reply naming what.
    local function bad_integer(value, what, low, high)
        if type(value) ~= 'string' or not string.match(value, '^-?%d+$') then
            return redis.error_reply('ERR invalid ' .. what .. ': ' .. tostring(value)
                .. ' is not an integer')
        end
        if integer_below(value, low) or integer_below(high, value) then
            return redis.error_reply('ERR invalid ' .. what .. ': ' .. value
                .. ' is out of range (' .. low .. ' to ' .. high .. ')')
        end
        return nil
    end

    -- A 64-bit signed integer (a count).
    local function bad_count(value, what)
        return bad_integer(value, what, '-9223372036854775808', '9223372036854775807')
    end

    return bad_integer, bad_count, integer_below
end
