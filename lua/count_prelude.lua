-- Shared by the scripts that take a 64-bit count in ARGV (a semaphore's
-- permits, a counter's value), prepended after lua/args_prelude.lua: the
-- exact comparisons such counts need (tonumber is exact only below 2^53).
-- Its own file, so that the other scripts do not build its closure on
-- every run (each `local function` is one per run).

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
