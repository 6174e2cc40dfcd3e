-- Shared by every script that takes a number in ARGV, prepended to it when
-- it is loaded. A runtime error in a script does not undo the writes that
-- ran before it, so each script checks its arguments with these before its
-- first write and replies with an error instead of half-running.
--
-- The limits match redisync's (src/error.rs): a duration is 1 to 2^47 ms
-- (MAX_LEASE, about 4459 years; Redis refuses an expiry once its clock plus
-- the value passes 2^63 ms, and Lua numbers are exact only below 2^53); an
-- absolute time is 0 to 2^48 ms since the epoch; a count is a 64-bit integer.

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

-- A duration in ms: 1 to 2^47.
local function bad_ms(value, what)
    return bad_integer(value, what, '1', '140737488355328')
end

-- An absolute time in ms since the epoch: 0 to 2^48.
local function bad_time(value, what)
    return bad_integer(value, what, '0', '281474976710656')
end

-- A 64-bit signed integer (a count).
local function bad_count(value, what)
    return bad_integer(value, what, '-9223372036854775808', '9223372036854775807')
end
