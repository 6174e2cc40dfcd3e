-- Shared by every write that acts once by its call's op record (a force
-- release, a delete, a drain, a set of permits or of a count), prepended
-- after args_prelude.lua (it uses bad_bounded). A call carries its record
-- optionally (redisync only), after the script's own KEYS and ARGV: its
-- last KEY, {name}:redisync_op:<op id> (one fresh id per call, the same
-- for every copy and resend of that call), and its last ARGV, how long the
-- record is kept in ms. The record holds the call's outcome once it acted
-- ('i<integer>', 's<string>' or 'n' for nil), or 'u' once the client
-- settled the call as not done (lua/op_settle.lua).
-- Two closures per run (about 15 ns each) and, with a record, one GET and
-- one SET.

-- The record's key and keep time (nil: an unrecorded call).
local op_key, op_ms

-- After the script's own checks: `own_args` is how many ARGV the script
-- takes without a record. Returns nil to go on (no record given, or the
-- call has not acted yet); otherwise the reply to give without writing:
-- the first copy's outcome (false for nil), an error for a bad keep time,
-- or `ERR late request` for a call settled as not done.
local function op_replay(own_args)
    if #ARGV <= own_args then
        return nil
    end
    op_key, op_ms = KEYS[#KEYS], ARGV[#ARGV]
    local bad = bad_bounded(op_ms, 'record', 1, MAX_MS)
    if bad then
        return bad
    end
    local record = redis.call('get', op_key)
    if not record then
        return nil
    end
    if record == 'u' then
        return redis.error_reply('ERR late request: its call was settled as not done '
            .. '(its op record says so), nothing written')
    end
    local kind = string.sub(record, 1, 1)
    if kind == 'i' then
        return tonumber(string.sub(record, 2))
    elseif kind == 's' then
        return string.sub(record, 2)
    end
    return false
end

-- Stores `reply`, the call's outcome, in its record (if it has one) and
-- returns it. An error reply is not stored (the scripts reply one only
-- before their first write).
local function op_keep(reply)
    if op_key then
        local kind = type(reply)
        local text = 'n'
        if kind == 'number' then
            text = 'i' .. string.format('%.0f', reply)
        elseif kind == 'string' then
            text = 's' .. reply
        elseif kind == 'table' then
            return reply
        end
        redis.call('set', op_key, text, 'px', op_ms)
    end
    return reply
end
