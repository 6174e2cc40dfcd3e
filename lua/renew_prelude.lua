-- Shared by the renewal scripts (lua/*renew*.lua), prepended to each when it
-- is loaded: whether an acquire attempt's record still says that its hold
-- is taken, read as that kind's acquire reads it. kind 'taken': the value
-- begins with 'taken' (a reentrant lock's 'taken', a fenced lock's
-- 'taken:<token>'; its release overwrites it with the outcome, a number,
-- and its undo with 'undone'); kind 'n': any value but '0' (a fair or
-- write lock's 1, a read hold's number; '0' = undone; their releases
-- delete the record: a release that keeps it as its latch instead must
-- leave a value read here as not taken). false (no record: expired,
-- deleted by a release, never written) is never taken.
local function record_taken(record, kind)
    if not record then
        return false
    end
    if kind == 'taken' then
        return string.sub(record, 1, 5) == 'taken'
    end
    return record ~= '0'
end
