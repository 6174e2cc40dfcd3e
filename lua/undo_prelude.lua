-- Shared by the undo scripts (lua/*_undo_acquire.lua but the expirable
-- semaphore's), prepended to each when it is loaded: reads an attempt's
-- record and marks it undone (the value `undone`, kept `keep_ms`, so that
-- the attempt is refused if it arrives later still), or with forget = '1'
-- (a replica-acknowledgement rollback, sent again at once) deletes it.
-- Returns the record as it was (false when there was none).
local function take_record(key, undone, keep_ms, forget)
    local record = redis.call('get', key)
    if forget == '1' then
        redis.call('del', key)
    else
        redis.call('set', key, undone, 'px', keep_ms)
    end
    return record
end
