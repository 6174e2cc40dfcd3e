-- Release one hold of a reentrant lock, idempotently.
-- KEYS[1]  the lock hash
-- KEYS[2]  the lock's channel, redisson_lock__channel:{name}
-- KEYS[3]  this request's unlock latch: a fresh key,
--          redisson_unlock_latch:{name}:<request id>, or (redisync only) the
--          record of the acquire attempt that took the hold being released,
--          {name}:redisync_attempt:<id> (see lua/lock_acquire.lua), which
--          then becomes the latch: one key written instead of a record
--          deleted and a latch created. A record still says 'taken'; once
--          released it holds the outcome, so a late copy of that acquire is
--          refused as well. (A fenced lock's record says 'taken:<token>'.)
-- ARGV[1]  the unlock message (0)
-- ARGV[2]  lease in milliseconds (the TTL a still-held lock gets)
-- ARGV[3]  holder id
-- ARGV[4]  how long the latch remembers this outcome, in ms
-- ARGV[5]  optional: a waiter's holder id, to hand the lock to on its last
--          hold (a direct handoff between two threads of one client): the
--          hash then holds that waiter once, with ARGV[6] as its TTL, and no
--          unlock message is published (the lock was never free)
-- ARGV[6]  with ARGV[5]: the waiter's lease in milliseconds
-- KEYS[4]  optional (redisync only): the lock's waiter queue,
--          {name}:redisync_waiters (see lua/lock_acquire.lua); the ARGV
--          after ARGV[4] are then the queue's (below), and the waiter's
--          come last
-- KEYS[5]  with KEYS[4]: the count of handoffs in a row,
--          {name}:redisync_handoffs (2 x lease + 60 s from the streak's
--          start), or 'y' for a moment after a release freed the lock for
--          the waiters outside the queue
-- KEYS[6]  with KEYS[4]: the clients that waited lately,
--          {name}:redisync_clients (see lua/lock_acquire.lua)
-- With KEYS[4]:
-- ARGV[5]  the claim window in ms: how long a handed hold waits for its
--          waiter to take it
-- ARGV[6]  how many redisync holders in a row (the first took the lock
--          free; the others were handed it, to the waiter or to the
--          queue's head, both counted) before a release frees it the usual
--          way (unlock message) instead, so that a waiter that is not in
--          the queue (Redisson's) gets its turn; only if
--          someone_else_listens()
-- ARGV[7]  optional: a waiter's holder id, as ARGV[5] without KEYS[4]
-- ARGV[8]  with ARGV[7]: the waiter's lease in milliseconds
-- ARGV[9]  with ARGV[7]: the waiter's queue entry when it has one of the
--          form 'd|<wait id>|<holder id>' or 'd|<wait id>+<lease
--          ms>|<holder id>' (see lua/lock_acquire.lua), or '' (queued by its
--          holder id), or '-' when it sent no attempt, so has no entry
--          (Optional and last: a release with no waiter to offer sends
--          three arguments fewer; each costs the server about as much as a
--          small redis.call's own work.)
-- ARGV[10] optional (ARGV[7] to ARGV[9] then given, '' for no waiter): how
--          many times the hold being released was passed from thread to
--          thread inside its client since the store last counted it (each
--          pass a redisync holder in a row that the store did not see): the
--          streak's count takes them in with this release's own handoff.
-- Each client's channel for this lock (the queue's head is told there) is
--          KEYS[2] .. ':redisync:' .. its client id (not an argument: one
--          fewer, and the same for every release of the lock).
-- With KEYS[4], the script runs after lua/window_prelude.lua (its
--          window_now: the time is read once per script).
-- Returns  nil = the holder does not hold it; 0 = one hold released, still held;
--          1 = released and the unlock message published; {2, count} =
--          released and handed to the waiter, the streak's count after it
--          (a retry reads 2: the count is not kept); 4 = as 1, at the end of a streak, for the
--          waiters outside the queue (the waiter not handed it then); 3 = handed
--          to the head of the queue, whose client is told on its channel: 'h:<server ms>:<claim window>:<wait
--          id>:' .. its holder id when it holds the lock outright (a queue
--          entry 'd|<wait id>|<holder id>'; for an entry 'd|<wait id>+<lease
--          ms>|<holder id>', a waiter with a fixed lease, 'h:<server
--          ms>:<lease ms>:<wait id>:' .. its holder id, the hold's TTL then
--          its lease), 'g:' .. its holder id when the
--          lock is only reserved for it (a waiter that never takes it: the
--          hold runs out after the claim window, and every queued waiter
--          retries at least once per claim window). A retry with the same
--          latch key returns the
--          first outcome without releasing again (the latch, or a record,
--          holds it for ARGV[4] ms).
-- Checked before any write (a script error does not undo earlier writes).
local lease, holder, latch_ms = ARGV[2], ARGV[3], ARGV[4]
local claim_ms, limit, waiter, waiter_lease, waiter_entry = '1', '0', ARGV[5], ARGV[6], nil
local passes = '0'
if KEYS[4] then
    claim_ms, limit, waiter, waiter_lease, waiter_entry = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9] or ''
    passes = ARGV[10] or '0'
end
if waiter == '' then
    waiter = nil
end
if not waiter then
    waiter_lease = '1'
end
-- Every duration told good by one pattern (each pattern call costs the
-- server about as much as a small redis.call's own work; one over all of
-- them little more than one): 1 to 14 digits each, no leading zero, so
-- 1 to below 10^14 < 2^47; the streak limit any count of up to 14 digits.
-- Anything else (a longer value, or a bad one) gets the exact verdicts.
if not (lease and latch_ms and claim_ms and limit and waiter_lease
        and #lease <= 14 and #latch_ms <= 14 and #claim_ms <= 14 and #limit <= 14
        and #waiter_lease <= 14 and #passes <= 14
        and string.find(lease .. ',' .. latch_ms .. ',' .. claim_ms .. ',' .. limit .. ','
            .. waiter_lease .. ',' .. passes, '^[1-9]%d*,[1-9]%d*,[1-9]%d*,%d+,[1-9]%d*,%d+$')) then
    local bad = bad_bounded(lease, 'lease', 1, MAX_MS)
        or bad_bounded(latch_ms, 'latch timeout', 1, MAX_MS)
        or bad_bounded(waiter_lease, 'lease', 1, MAX_MS)
    if bad then
        return bad
    end
    -- Inline rather than bad_bounded (their messages name them).
    local claim = tonumber(claim_ms)
    if not (claim and claim >= 1 and claim <= MAX_MS and claim % 1 == 0) then
        return redis.error_reply('ERR invalid claim window: ' .. tostring(claim_ms))
    end
    local streak = tonumber(limit)
    if not (streak and streak >= 0 and streak % 1 == 0) then
        return redis.error_reply('ERR invalid handoff streak: ' .. tostring(limit))
    end
    local passed = tonumber(passes)
    if not (passed and passed >= 0 and passed <= MAX_MS and passed % 1 == 0) then
        return redis.error_reply('ERR invalid count of passes: ' .. tostring(passes))
    end
end
local done = redis.call('get', KEYS[3])
if done and string.sub(done, 1, 5) ~= 'taken' then
    return tonumber(done)
end
-- The count in one read: the last hold (the common case) then needs no
-- HINCRBY before the DEL. (A reserved hold, count 0, is a last one too.)
-- A count of '1' (the usual last hold) is not parsed.
local count = redis.call('hget', KEYS[1], holder)
if count ~= '1' then
    count = tonumber(count)
    if not count then
        -- Not held by this holder: its hold ran out (or was forced free).
        -- A record that still says taken is the lapsed hold's: mark it, or
        -- a renewal of that hold still on its way would renew the holder's
        -- next hold (a copy of this call reads 'lapsed' as nil too).
        if done then
            redis.call('set', KEYS[3], 'lapsed', 'px', latch_ms)
        end
        return nil
    end
    if count > 1 then
        redis.call('hincrby', KEYS[1], holder, '-1')
        redis.call('pexpire', KEYS[1], lease)
        redis.call('set', KEYS[3], '0', 'px', latch_ms)
        return 0
    end
end
redis.call('del', KEYS[1])
-- Whether a connection other than redisync's clients listens on the lock's
-- channel (a Redisson waiter): a redisync client listens on its own channel
-- and on the lock's, one connection for both, from its first wait until a
-- short linger after its last, so PUBSUB NUMSUB of the lock's channel
-- exceeds the sum over the channels of the clients that waited lately
-- (KEYS[6], pruned to the last 10 s; the queue and this client too) exactly
-- by the others. A client that still listens but is not counted counts as
-- other: the lock is then freed once more than needed, never less.
local LATELY_MS = 10000
-- How long a client's note (when it last queued) keeps it counted through
-- its linger after being handed the lock: LATELY_MS less a linger of 2 s
-- and a margin.
local NOTED_FOR_US = 5000000
-- How long a release that frees the lock for the waiters outside the queue
-- keeps the queue's attempts off it.
local YIELD_MS = 100
local yielded = false
local function someone_else_listens(head)
    local seen, channels = {}, {}
    local client_prefix = KEYS[2] .. ':redisync:'
    local function add(member)
        local client = member
            and string.match(string.match(member, '^d|[^|]*|(.*)$') or member, '^(.*):[^:]*$')
        if client and not seen[client] then
            seen[client] = true
            channels[#channels + 1] = client_prefix .. client
        end
    end
    add(holder)
    add(head)
    for _, member in ipairs(redis.call('zrange', KEYS[4], 0, 999)) do
        add(member)
    end
    local now = window_now or redis.call('time')
    local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
    local old = redis.call('zrangebyscore', KEYS[6], '-inf', now_ms - LATELY_MS, 'limit', 0, 1000)
    if #old > 0 then
        redis.call('zrem', KEYS[6], (table.unpack or unpack)(old))
    end
    for _, client in ipairs(redis.call('zrangebyscore', KEYS[6], now_ms - LATELY_MS, '+inf', 'limit', 0, 1000)) do
        add(client .. ':0')
    end
    local counts = redis.call('pubsub', 'numsub', KEYS[2], (table.unpack or unpack)(channels))
    local ours = 0
    for i = 4, #counts, 2 do
        ours = ours + counts[i]
    end
    return counts[2] > ours
end
-- The handoffs in a row, this one counted, or nil when this release
-- frees the lock for the waiters outside the queue instead (then marked
-- 'y'): in-process handoffs and the queue's alike, so that at most
-- ARGV[9] redisync holders in a row (the first took it free) pass
-- whoever else waits by. (A fresh count when nobody else listens.)
-- Counted by INCR, one call: the count keeps the TTL set at its start,
-- as long as the queue's (2 x lease + 60 s), not the claim window, so
-- that a streak of holds each longer than the claim window still ends
-- (a count that ran out between two handoffs would start over, and a
-- waiter outside the queue would never have its turn).
local function count_ttl()
    return string.format('%d', 2 * tonumber(lease) + 60000)
end
-- This release's step of the count: its handoff, and the passes inside
-- the client before it (taken in once, by the first handoff tried).
local step = passes == '0' and '1' or string.format('%d', tonumber(passes) + 1)
local function next_in_streak(head)
    local streak = redis.pcall('incrby', KEYS[5], step)
    if type(streak) ~= 'number' then
        -- Not a count ('y': a yield's mark, cut short by this handoff).
        streak = tonumber(step)
        redis.call('set', KEYS[5], step, 'px', count_ttl())
    elseif streak == tonumber(step) then
        redis.call('pexpire', KEYS[5], count_ttl())
    end
    step = '1'
    if streak < tonumber(limit) then
        return streak
    end
    if someone_else_listens(head) then
        redis.call('set', KEYS[5], 'y', 'px', YIELD_MS)
        yielded = true
        return nil
    end
    redis.call('set', KEYS[5], '1', 'px', count_ttl())
    return 1
end

if waiter then
    local streak
    if KEYS[4] then
        streak = next_in_streak(waiter)
    end
    if not yielded then
        redis.call('hset', KEYS[1], waiter, '1')
        redis.call('pexpire', KEYS[1], waiter_lease)
        redis.call('set', KEYS[3], '2', 'px', latch_ms)
        if KEYS[4] then
            if waiter_entry ~= '-' then
                redis.call('zrem', KEYS[4], waiter, waiter_entry)
            end
            -- The count goes back with the handoff: the waiter may pass the
            -- hold on inside its client up to the streak's end.
            return {2, streak}
        end
        return 2
    end
end

if KEYS[4] and not yielded then
    -- The head of the queue whose client still listens (PUBLISH counts
    -- the receivers: a client that is gone is passed over), a few at most.
    for _ = 1, 4 do
        -- Popped at once (one call for ZRANGE + ZREM): put back below if
        -- the lock is freed instead.
        local popped = redis.call('zpopmin', KEYS[4])
        local head = popped[1]
        if not head then
            break
        end
        local streak = next_in_streak(head)
        if not streak then
            -- Free it the usual way below (Redisson's waiters hear only
            -- that), and keep the queue's own attempts off it for a
            -- moment ('y', see lua/lock_acquire.lua): they would win
            -- the race for it every time. The head keeps its place.
            redis.call('zadd', KEYS[4], popped[2], head)
            redis.call('pexpire', KEYS[4], count_ttl())
            break
        end
        -- 'd|<wait id>|<holder id>': handed outright, the wait named.
        local wait, field = string.match(head, '^d|([^|]*)|(.*)$')
        local outright = field ~= nil
        -- The handed hold's TTL: the claim window until the waiter's
        -- watchdog renews it, or ('<wait id>+<lease ms>') the lease of a
        -- waiter without one, as its own attempt would have set.
        local ttl = claim_ms
        if outright then
            head = field
            local id, fixed = string.match(wait, '^(%d+)%+(%d+)$')
            if id and tonumber(fixed) >= 1 and tonumber(fixed) <= MAX_MS then
                wait, ttl = id, fixed
            end
        end
        local client = string.match(head, '^(.*):[^:]*$')
        local now = window_now or redis.call('time')
        -- Spelled from TIME's strings: no number parsed or formatted.
        local now_ms = now[1] .. string.sub('00000' .. now[2], -6, -4)
        local message = 'g:' .. head
        if outright then
            message = 'h:' .. now_ms .. ':' .. ttl .. ':' .. wait .. ':' .. head
        end
        if client and head ~= holder
            and redis.call('publish', KEYS[2] .. ':redisync:' .. client, message) > 0 then
            -- Outright: one hold, the claim window as TTL until the
            -- waiter's watchdog renews it (or the waiter's fixed lease).
            -- Else count 0: reserved for the waiter, whose next attempt
            -- takes it.
            redis.call('hset', KEYS[1], head, outright and '1' or '0')
            redis.call('pexpire', KEYS[1], ttl)
            -- It listens on for a while after its wait ends (the
            -- subscriber's linger, 2 s): counted among the clients that
            -- waited lately until then. Its queuing noted it already (at
            -- its arrival, the entry's score in µs), which covers that
            -- unless it waited long.
            if (now[1] * 1000000 + now[2]) - tonumber(popped[2]) > NOTED_FOR_US then
                -- (The TTL set when a client joins, as in lua/lock_acquire.lua.)
                if redis.call('zadd', KEYS[6], now_ms, client) == 1 then
                    redis.call('pexpire', KEYS[6], count_ttl())
                end
            end
            redis.call('set', KEYS[3], '3', 'px', latch_ms)
            return 3
        end
    end
end
-- Freed with nobody to hand it to: whoever takes it free goes on with a
-- streak under way (lua/lock_acquire.lua counts that take), so at the
-- streak's end the lock is freed for the others here as well, or the
-- count starts over.
if KEYS[4] and not yielded then
    local streak = tonumber(redis.call('get', KEYS[5]))
    if streak and passes ~= '0' then
        -- The passes inside the client were redisync holders in a row.
        streak = redis.call('incrby', KEYS[5], passes)
    end
    if streak and streak + 1 >= tonumber(limit) then
        if someone_else_listens(nil) then
            redis.call('set', KEYS[5], 'y', 'px', YIELD_MS)
            yielded = true
        else
            redis.call('del', KEYS[5])
        end
    end
end
redis.call('publish', KEYS[2], ARGV[1])
-- The outcome written as a string (a Lua number passed to redis.call is
-- formatted by snprintf).
redis.call('set', KEYS[3], yielded and '4' or '1', 'px', latch_ms)
return yielded and 4 or 1
