//! Redisson 4.7's own two lock scripts, as its clients send them: the
//! floor of `benches/lock.rs` (`floor/redisson_pair`) and the polling peer
//! of `benches/processes.rs` (rs-redisson's loop) run them raw by EVALSHA.

/// Redisson 4.7's own lock script (`RedissonLock.tryLockInnerAsync`), as
/// its clients send it: acquire or re-enter, else the lock's PTTL.
pub(crate) const REDISSON_LOCK: &str = "\
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
redis.call('hincrby', KEYS[1], ARGV[2], 1); \
redis.call('pexpire', KEYS[1], ARGV[1]); \
return nil; \
end; \
return redis.call('pttl', KEYS[1]);";

/// Redisson 4.7's own unlock script (`RedissonLock.unlockInnerAsync`): the
/// unlock latch, one hold released, the unlock message on the last.
pub(crate) const REDISSON_UNLOCK: &str = "\
local val = redis.call('get', KEYS[3]); \
if val ~= false then return tonumber(val); end; \
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
if (counter > 0) then \
redis.call('pexpire', KEYS[1], ARGV[2]); \
redis.call('set', KEYS[3], 0, 'px', ARGV[5]); \
return 0; \
else \
redis.call('del', KEYS[1]); \
redis.call(ARGV[4], KEYS[2], ARGV[1]); \
redis.call('set', KEYS[3], 1, 'px', ARGV[5]); \
return 1; \
end;";
