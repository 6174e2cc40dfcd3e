-- Acquire, re-enter or queue for a fair lock (Redisson's RFairLock).
-- Loaded after fair_lock_prelude.lua (evict_stale_waiters, shift_slots).
-- KEYS[1]  the lock: a hash of holder id -> hold count
-- KEYS[2]  the queue of waiter ids, FIFO: redisson_lock_queue:{name}
-- KEYS[3]  waiter id -> slot deadline in ms: redisson_lock_timeout:{name}
-- KEYS[4]  optional (redisync only): this attempt's record,
--          {name}:redisync_attempt:<attempt id>, with the lease (or
--          ARGV[10]) as TTL: 'taken' when the attempt takes a hold, 'busy'
--          when it does not ('undone', by lua/fair_lock_undo_acquire.lua; once its hold was
--          released, the release's outcome: lua/fair_lock_release.lua keeps
--          it there as the unlock latch). An attempt whose record is there
--          does not act again, and writes nothing (not even the queue):
--          'taken' and the holder still holds it (the request resent) =
--          acquired, no second hold; anything else = refused as a late
--          request.
-- KEYS[5]  optional (redisync only, with KEYS[4]): this holder's direct
--          mark, {name}:redisync_fair_direct:<holder id>, a string
--          '<wait id>:<allowance ms>:<live until>' while the holder waits in
--          the queue (live until: server ms after which, not refreshed, it
--          counts as gone: now + ARGV[9])
--          and a release may hand it the lock outright (see
--          lua/fair_lock_release.lua). Set when it joins the queue with
--          ARGV[6] (deleted when it joins with ARGV[6] = ''), refreshed by
--          its later attempts while queued, deleted when it takes the lock
--          or gives up; a release that hands it the lock leaves it (it
--          names a wait that has ended; the holder's next join rewrites it).
--          Redisson's scripts never read it.
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  holder id, <client uuid>:<thread number>
-- ARGV[3]  the waiter's allowance in ms (fair-lock wait timeout, or the try_lock_for wait)
-- ARGV[4]  the caller's wall clock in ms
-- ARGV[5]  1 = join the queue if the lock cannot be had now; 0 = do not (try_lock)
-- ARGV[6]  with KEYS[5]: this wait's id when a release may hand it the lock
--          outright (a waiter whose watchdog renews the hold), or ''
-- ARGV[7]  with KEYS[5]: 1 = the first attempt of a wait whose holder has no
--          guard of this lock: a hold the lock gives that holder was handed
--          to an earlier wait of it that ended just then (its give-back
--          lost), and is given back, the head told to try, instead of being
--          re-entered past the queue; 2 = a later attempt of the wait: a
--          hold the lock gives that holder while it is out of the queue was
--          handed to this wait outright (one hold) while the attempt was on
--          its way, or its message came too late to trust, and is taken as
--          it is (counted again, the waiter's one guard would leave a hold
--          behind); 0 otherwise
-- ARGV[8]  with KEYS[5]: the channel prefix, redisson_lock__channel:{name}
-- ARGV[9]  with KEYS[5]: how long a mark this attempt writes counts the
--          waiter as alive without a refresh, in ms (several of its retry
--          intervals: it retries at least once per claim window)
-- ARGV[10] optional (redisync only, with KEYS[4]): how long the record is
--          kept, in ms, when longer than the lease: until every copy of
--          this request is past its window (ARGV[6] to ARGV[9] are then
--          given: '', 0, '', 1 without KEYS[5])
-- Returns  nil when acquired (hold count + 1, TTL reset to the lease);
--          otherwise how long to wait in ms before trying again (the slot
--          ahead's remaining time, or the lock's PTTL; -1 = until a message).
-- Checked before any write (a script error does not undo earlier writes).
local bad = bad_bounded(ARGV[1], 'lease', 1, MAX_MS)
    or bad_bounded(ARGV[3], 'wait allowance', 1, MAX_MS)
    or bad_bounded(ARGV[4], 'now', 0, MAX_TIME)
    or (KEYS[5] and ARGV[6] ~= '' and bad_bounded(ARGV[9], 'mark live time', 1, MAX_MS))
    or (ARGV[10] and bad_bounded(ARGV[10], 'record keep time', 1, MAX_MS))
if bad then
    return bad
end
-- One call tells a free lock and the holder's own hold apart (the hash has
-- one field, its holder's).
local fields = redis.call('hkeys', KEYS[1])
local free = #fields == 0
local mine = false
for i = 1, #fields do
    if fields[i] == ARGV[2] then
        mine = true
    end
end
-- This attempt's record, claimed by the attempt's first write and only
-- if absent (SET NX: one call, where a read first and a write at the end
-- were two). One there already is this attempt's own, resent or late: the
-- attempt then writes nothing (not even the queue) and `claim` gives its
-- reply: 'taken' while the holder still holds it = acquired, no second
-- hold; 'busy' = busy again (a busy attempt is spent: a copy that lands
-- later, sent again at once after its connection dropped while a
-- middlebox held the original, must not take the lock for a caller told
-- it was busy); anything else = refused as late. Returns true and that
-- reply, or false. Where the outcome is not known before the first write
-- (a free or stranded lock: evictions come first) 'busy' is claimed, and
-- made 'taken' if the attempt takes the hold.
local keep = ARGV[10] or ARGV[1]
local claimed = not KEYS[4]
local function claim(value)
    if claimed then
        return false
    end
    claimed = true
    if redis.call('set', KEYS[4], value, 'px', keep, 'nx') then
        return false
    end
    local record = redis.call('get', KEYS[4])
    if record == 'taken' and mine then
        return true, nil
    end
    if record == 'busy' then
        return true, math.max(redis.call('pttl', KEYS[1]), 1)
    end
    return true, redis.error_reply('ERR late request: this acquire attempt was undone or released already')
end
local now = tonumber(ARGV[4])
local stranded = mine and KEYS[5] and ARGV[7] == '1'
if stranded or free then
    local again, reply = claim('busy')
    if again then
        return reply
    end
end
if stranded then
    redis.call('del', KEYS[1])
    free, mine = true, false
end
-- The holder's direct mark: '<wait id>:<allowance>:<live until>' (see
-- KEYS[5]), for a waiter whose slot has `slot_left` ms to run.
local function mark(slot_left)
    if not KEYS[5] then
        return
    end
    if ARGV[6] and ARGV[6] ~= '' then
        local time = window_now or redis.call('time')
        local live = tonumber(ARGV[9])
        local live_until = time[1] * 1000 + math.floor(time[2] / 1000) + live
        -- It must outlive its live-until for as long as the slot lasts (a
        -- mark that vanished would make a gone waiter look like a Redisson
        -- one, kept until its slot runs out), and twice the lease at least.
        local ttl = math.max(2 * tonumber(ARGV[1]), slot_left + live)
        redis.call('set', KEYS[5], ARGV[6] .. ':' .. ARGV[3] .. ':'
            .. string.format('%d', live_until), 'px', string.format('%d', ttl))
    else
        redis.call('del', KEYS[5])
    end
end
-- Free, and nobody queued or the caller is first: take it. (Redisync
-- waiters ahead whose marks say they are gone leave the queue: a release
-- keeps an unheard head while its mark says it lives, so only the
-- waiters' own attempts find it gone.)
if free then
    local mark_prefix = KEYS[5] and string.sub(KEYS[5], -#ARGV[2]) == ARGV[2]
        and string.sub(KEYS[5], 1, #KEYS[5] - #ARGV[2])
    local head = evict_stale_waiters(KEYS[2], KEYS[3], now, mark_prefix, ARGV[2])
    if head == false or head == ARGV[2] then
        if head then
            redis.call('lpop', KEYS[2])
            redis.call('zrem', KEYS[3], ARGV[2])
            -- Everyone behind moves up one slot.
            shift_slots(KEYS[3], ARGV[3])
        end
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        if KEYS[4] then
            redis.call('set', KEYS[4], 'taken', 'px', keep)
        end
        if KEYS[5] and head then
            redis.call('del', KEYS[5])
        end
        return nil
    end
    if stranded then
        redis.call('publish', ARGV[8] .. ':' .. head, '0')
    end
end
-- Re-entry, or (a retry, out of the queue) the hold handed to this wait.
if mine then
    local again, reply = claim('taken')
    if again then
        return reply
    end
    if not (KEYS[5] and ARGV[7] == '2' and not redis.call('zscore', KEYS[3], ARGV[2])) then
        redis.call('hincrby', KEYS[1], ARGV[2], 1)
    end
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
-- Busy (the lock held, or another waiter first): spent, queued or not.
local again, reply = claim('busy')
if again then
    return reply
end
if ARGV[5] ~= '1' then
    return math.max(redis.call('pttl', KEYS[1]), 1)
end
-- Stale waiters are evicted as Redisson's acquire evicts them, at once
-- (a live waiter that outlived its slot is then queued again at the tail,
-- not overtaken later in its old place): the earliest deadline tells
-- whether any is stale.
local first = redis.call('zrange', KEYS[3], 0, 0, 'withscores')
if first[2] and tonumber(first[2]) <= now then
    evict_stale_waiters(KEYS[2], KEYS[3], now)
end
-- Join the tail (ZADD NX: unless queued already); the slot lasts the
-- allowance past the slot ahead (or the lock's TTL). The slot ahead is the
-- latest deadline: slots grow along the queue, so it is the last waiter's
-- (one call, not LINDEX and ZSCORE).
local last = redis.call('zrange', KEYS[3], -1, -1, 'withscores')
local ttl
if last[1] then
    ttl = tonumber(last[2]) - now
else
    ttl = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], 'nx', ttl + tonumber(ARGV[3]) + now, ARGV[2]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[2])
    mark(ttl + tonumber(ARGV[3]))
    return math.max(ttl, 1)
end
-- Already queued: wait until the slot ahead runs out.
local queued = redis.call('zscore', KEYS[3], ARGV[2])
mark(tonumber(queued) - now)
local ahead = tonumber(queued) - tonumber(ARGV[3]) - now
if ahead > 0 then
    return ahead
end
-- The slot ahead ran out while its owner still holds the lock: wait for
-- the lock's TTL (-1 = none: wait for the unlock message), not 1 ms.
local ttl = redis.call('pttl', KEYS[1])
if ttl ~= -2 then
    return ttl
end
-- Free, and a live head has not taken it yet: wait for the head's slot.
local head = redis.call('lindex', KEYS[2], 0)
return math.max(tonumber(redis.call('zscore', KEYS[3], head) or now) - now, 1)
