-- Shared by the renewal scripts (lua/*renew*.lua), prepended to each when it
-- is loaded: whether an acquire attempt's record still says that its hold
-- is taken. Every lock kind's acquire writes 'taken' (reentrant, fair,
-- write) or 'taken:<...>' (a fenced lock's token, a read hold's number);
-- its release overwrites it with the outcome (a number) and its undo with
-- 'undone', neither read here as taken. false (no record: expired, never
-- written) is never taken. `kind` (what the caller says its records are,
-- 'taken' or 'n') reads the same: every kind's record begins with 'taken'.
local function record_taken(record, kind)
    local _ = kind
    return record and string.sub(record, 1, 5) == 'taken' or false
end
