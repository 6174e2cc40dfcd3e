-- Acquire or re-enter a reentrant lock (Redisson's RLock).
-- KEYS[1]  the lock: a hash of holder id -> hold count
-- KEYS[2]  optional (redisync only): this attempt's record,
--          {name}:redisync_attempt:<attempt id>, a string with the
--          lease (or ARGV[5]) as TTL: 'taken' = this attempt took a hold; 'undone'
--          (lua/lock_undo_acquire.lua); or, once its hold was released, the
--          release's outcome (lua/lock_release.lua keeps it there as the
--          unlock latch). An attempt whose record is there does not act
--          again: 'taken' (the request resent) = acquired, no second hold;
--          anything else = refused as a late request. (A record found while
--          another holder has the lock: its PTTL, nothing written.)
-- KEYS[3]  optional (redisync only, with KEYS[2]): the lock's waiter
--          queue, {name}:redisync_waiters, a sorted set of holder ids by
--          arrival (server time in µs). A failed attempt joins it (once: a
--          waiter keeps its place); a release hands the lock to its head
--          (lua/lock_release.lua), which then takes it with its next attempt.
-- KEYS[4]  with KEYS[3]: the clients that waited lately,
--          {name}:redisync_clients, a sorted set of client ids by when they
--          last waited or were handed the lock (server ms): they may still
--          listen on the lock's channel (lua/lock_release.lua counts them)
-- KEYS[5]  optional, with KEYS[3]: the lock's count of handoffs in a row,
--          {name}:redisync_handoffs: while it says 'y' a release has just
--          freed the lock for the waiters outside the queue (Redisson's), and
--          this attempt keeps off a free lock (it joins the queue and
--          returns that mark's PTTL); a count there (a streak under way)
--          counts this attempt's taking the free lock as one more
--          (see lua/lock_release.lua, ARGV[9])
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id, <client uuid>:<thread number>
-- ARGV[3]  with KEYS[3]: 'retry' when this waiter may be queued already (an
--          acquisition then leaves the queue), 'first' otherwise
-- ARGV[4]  with KEYS[3]: this wait's queue entry when a release may hand
--          the waiter the lock outright, 'd|<wait id>|<holder id>' (a
--          thread's watchdog hold, which its watchdog then renews) or
--          'd|<wait id>+<lease ms>|<holder id>' (a thread's hold with a fixed
--          lease: handed with that lease as TTL); '' when it may only
--          reserve it (the entry is then the holder id)
-- ARGV[5]  optional (redisync only, with KEYS[2]): how long the record is
--          kept, in ms, when longer than the lease: until every copy of
--          this request is past its window (ARGV[3] and ARGV[4] are then
--          given: 'first' and '' without KEYS[3])
-- With KEYS[3], the script runs after lua/window_prelude.lua (its
--          window_now: the time is read once per script).
-- Returns  nil when acquired (hold count + 1, TTL reset to the lease);
--          otherwise the lock's remaining TTL in ms (PTTL; -1 = no expiry).
--          A hold handed to this waiter by a release has count 0 until this
--          attempt takes it (the hold count becomes 1, the TTL the lease);
--          one handed to this wait outright (count 1, its entry gone from
--          the queue) is taken as it is (the TTL the lease).
-- Checked before any write (a script error does not undo earlier writes).
-- Notes in `clients` that the client of `holder` waited just now. The
-- set's TTL is set when a client joins it (not at every note: one call
-- less on each wait); a set that outlives it while in use loses its notes
-- at once, and a release then counts those clients as listeners outside
-- the queue until they queue again: the lock is freed once more than
-- needed, never less.
local function note_client(clients, holder, lease)
    local client = string.match(holder, '^(.*):[^:]*$')
    if client then
        local now = window_now or redis.call('time')
        -- Server ms spelled from TIME's strings (a Lua number given to
        -- redis.call is formatted by snprintf's %.17g, a few k
        -- instructions of the server's each).
        if redis.call('zadd', clients, now[1] .. string.sub('00000' .. now[2], -6, -4), client) == 1 then
            redis.call('pexpire', clients, string.format('%d', 2 * tonumber(lease) + 60000))
        end
    end
end

-- The lease and the record's keep time, told good by one pattern over the
-- two (each pattern call costs the server about as much as a small
-- redis.call's own work; one over both costs little more than one): 1 to
-- 14 digits each, no leading zero, so 1 to below 10^14 < 2^47. Anything
-- else (a longer value, or a bad one) gets the exact verdicts below.
local lease = ARGV[1]
local keep = ARGV[5] or lease
if not (lease and #lease <= 14 and #keep <= 14
        and string.find(lease .. ',' .. keep, '^[1-9]%d*,[1-9]%d*$')) then
    local bad = bad_bounded(lease, 'lease', 1, MAX_MS)
    if bad then
        return bad
    end
    -- Inline rather than bad_bounded (its message names the record).
    local ms = tonumber(keep)
    if not (ms and ms >= 1 and ms <= MAX_MS and ms % 1 == 0) then
        return redis.error_reply('ERR invalid record keep time: ' .. tostring(keep))
    end
end
-- PTTL rather than EXISTS: a failed attempt returns it, one call for both.
local ttl = redis.call('pttl', KEYS[1])
local free = ttl == -2
local streak = free and KEYS[5] and redis.call('get', KEYS[5])
local yielded = streak == 'y'
if (free and not yielded) or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    -- The record first, only if absent: one call on the common path; one
    -- that is there already is this attempt's: resent ('taken'), or
    -- undone or released since (a late copy).
    if KEYS[2] and not redis.call('set', KEYS[2], 'taken', 'px', keep, 'nx') then
        local record = redis.call('get', KEYS[2])
        if record == 'taken' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
            return nil
        end
        if record == 'busy' then
            -- Another copy of this attempt found the lock busy: it stays
            -- spent (see below).
            return ttl > 0 and ttl or 1
        end
        return redis.error_reply('ERR late request: this acquire attempt was undone or released already')
    end
    -- A retry of a wait queued to be handed the lock outright, finding its
    -- holder in the hash and its entry gone from the queue: a release
    -- handed this wait the lock (one hold) while the retry was on its way,
    -- or its handoff message came too late to trust. That hold is this
    -- attempt's as it is: counted again, the waiter's one guard would
    -- leave a hold behind. (Any other hold of this holder id is a
    -- re-entry: a holder that has the lock never waits for it. The one
    -- exception: two threads sharing an explicit holder id, one waiting
    -- while the queue key expired under it, 2 x lease + 60 s without a
    -- join, and the other taking the lock meanwhile.)
    local handed = not free and ARGV[3] == 'retry' and KEYS[3]
        and string.sub(ARGV[4], 1, 2) == 'd|'
        and not redis.call('zscore', KEYS[3], ARGV[4])
    if not handed then
        -- Numbers to redis.call as strings: a Lua number is formatted by
        -- snprintf on every call.
        redis.call('hincrby', KEYS[1], ARGV[2], '1')
    end
    redis.call('pexpire', KEYS[1], lease)
    -- Taken free in a streak under way (a release found nobody to hand
    -- it to): one more redisync holder in a row (INCR keeps the TTL).
    if free and tonumber(streak) then
        redis.call('incr', KEYS[5])
    end
    if KEYS[3] and ARGV[3] == 'retry' then
        redis.call('zrem', KEYS[3], ARGV[2], ARGV[4])
        note_client(KEYS[4], ARGV[2], lease)
    end
    return nil
end
local member = ARGV[2]
if ARGV[4] and ARGV[4] ~= '' then
    member = ARGV[4]
end
local now = KEYS[3] and (window_now or redis.call('time'))
-- NX: a waiter queued already keeps its place (and its arrival).
-- (The arrival in µs and the TTL as strings, as in note_client.)
if KEYS[3] and redis.call('zadd', KEYS[3], 'nx', now[1] .. string.sub('00000' .. now[2], -6), member) == 1 then
    -- Outlives any wait between a waiter's attempts (each failed attempt
    -- renews it); a waiter whose entry expired rejoins at its next attempt.
    redis.call('pexpire', KEYS[3], string.format('%d', 2 * tonumber(lease) + 60000))
    note_client(KEYS[4], ARGV[2], lease)
end
-- A busy attempt is spent: a copy of it that lands later (sent again at
-- once after its connection dropped, while a middlebox held the original)
-- must not take the lock then, for a caller told it was busy.
if KEYS[2] then
    redis.call('set', KEYS[2], 'busy', 'px', keep, 'nx')
end
if yielded then
    return redis.call('pttl', KEYS[5])
end
-- Nothing above changed the lock's TTL.
return ttl
