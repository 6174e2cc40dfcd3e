//! The keyspace: typed values under binary-safe keys, with expiry.
//!
//! Expiry is active, as in Redis: an expired key is absent to every access,
//! and [`Keyspace::expire_due`] drops every key whose deadline has passed
//! through an index ordered by deadline, so the cost is O(expired), not
//! O(keys).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::Instant;

/// A `HashMap` with [`FxHasher`].
pub(super) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
/// A set with the same hasher.
pub(super) type FastSet<K> = std::collections::HashSet<K, BuildHasherDefault<FxHasher>>;

/// The Fx hash (rustc's): a multiply and a rotate per 8 bytes, several
/// times faster than the default SipHash on short keys, which every
/// command hashes once or twice. It is not hardened against keys chosen to
/// collide: this store serves tests and one process, whose keys that
/// process names itself.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct FxHasher {
    hash: u64,
}

impl FxHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut buf = [0u8; 8];
            buf.copy_from_slice(word);
            self.add(u64::from_le_bytes(buf));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(buf));
        }
    }

    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

/// The Redis types the scripts use.
#[derive(Debug, Clone)]
pub(super) enum Value {
    /// A string (an unlock latch, a counter, a read hold).
    Str(Vec<u8>),
    /// A hash (a lock: holder → hold count; a read-write lock's `mode`).
    Hash(FastMap<Vec<u8>, Vec<u8>>),
    /// A list (a fair lock's queue).
    List(VecDeque<Vec<u8>>),
    /// A sorted set, member → score (slot deadlines, lease ends).
    ZSet(FastMap<Vec<u8>, f64>),
    /// A set (no script of `lua/` uses one yet: for a new primitive's).
    Set(FastSet<Vec<u8>>),
}

impl Value {
    /// An empty hash, list or sorted set, which Redis never keeps.
    pub(super) fn is_empty_container(&self) -> bool {
        match self {
            Value::Str(_) => false,
            Value::Hash(fields) => fields.is_empty(),
            Value::List(items) => items.is_empty(),
            Value::ZSet(members) => members.is_empty(),
            Value::Set(members) => members.is_empty(),
        }
    }
}

/// One key's value and deadline.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) value: Value,
    /// `None`: no expiry (`PTTL` -1). Changed only through
    /// [`Keyspace::set_expiry`], which keeps the index in step.
    expires_at: Option<Instant>,
}

impl Entry {
    /// The deadline, if any.
    pub(super) fn expires_at(&self) -> Option<Instant> {
        self.expires_at
    }

    fn is_expired(&self, now: Instant) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

/// The keys, and an index by deadline of those with an expiry: every unlock
/// writes a latch with a TTL, and a long-running process must not keep
/// them all.
///
/// A key is stored once and shared by the map and the index (`Arc`), so
/// changing an expiry allocates nothing.
#[derive(Debug, Default)]
pub(super) struct Keyspace {
    map: FastMap<Arc<[u8]>, Entry>,
    /// `(deadline, key)` for exactly the entries whose `expires_at` is
    /// `Some(deadline)`.
    expiries: BTreeSet<(Instant, Arc<[u8]>)>,
}

impl Keyspace {
    /// The live entry at `key`; an expired one is dropped first.
    pub(super) fn live(&mut self, key: &[u8], now: Instant) -> Option<&mut Entry> {
        if self.map.get(key)?.is_expired(now) {
            self.remove(key);
            return None;
        }
        self.map.get_mut(key)
    }

    /// Whether `key` holds a live value.
    pub(super) fn exists(&mut self, key: &[u8], now: Instant) -> bool {
        self.live(key, now).is_some()
    }

    /// The live entry at `key`, created with `empty()` and no expiry when
    /// absent.
    pub(super) fn live_or_insert(
        &mut self,
        key: &[u8],
        now: Instant,
        empty: fn() -> Value,
    ) -> &mut Entry {
        // Looked up before inserting, which would copy the key every time.
        match self.map.get(key).map(|entry| entry.is_expired(now)) {
            Some(false) => {}
            expired => {
                if expired.is_some() {
                    self.remove(key);
                }
                self.map.insert(
                    Arc::from(key),
                    Entry {
                        value: empty(),
                        expires_at: None,
                    },
                );
            }
        }
        // Present: inserted just above if it was not. (Returning the
        // `get_mut` of a first lookup does not pass today's borrow checker.)
        #[allow(clippy::unwrap_used)]
        self.map.get_mut(key).unwrap()
    }

    /// Stores `value` at `key` with `expires_at`, replacing whatever was
    /// there and its expiry (`SET`).
    pub(super) fn insert(&mut self, key: &[u8], value: Value, expires_at: Option<Instant>) {
        self.remove(key);
        let key: Arc<[u8]> = Arc::from(key);
        if let Some(at) = expires_at {
            self.expiries.insert((at, Arc::clone(&key)));
        }
        self.map.insert(key, Entry { value, expires_at });
    }

    /// Deletes `key`, expired or not.
    pub(super) fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let (key, entry) = self.map.remove_entry(key)?;
        if let Some(at) = entry.expires_at {
            self.expiries.remove(&(at, key));
        }
        Some(entry)
    }

    /// Deletes `key` if it holds an empty container (Redis deletes a hash,
    /// list or sorted set when its last element goes).
    pub(super) fn drop_if_empty(&mut self, key: &[u8]) {
        if self
            .map
            .get(key)
            .is_some_and(|entry| entry.value.is_empty_container())
        {
            self.remove(key);
        }
    }

    /// Sets the deadline of `key` if it exists.
    pub(super) fn set_expiry(&mut self, key: &[u8], at: Option<Instant>) {
        let Some((key, entry)) = self.map.get_key_value(key) else {
            return;
        };
        let (key, old) = (Arc::clone(key), entry.expires_at);
        if old == at {
            return;
        }
        if let Some(entry) = self.map.get_mut(&key) {
            entry.expires_at = at;
        }
        if let Some(old) = old {
            self.expiries.remove(&(old, Arc::clone(&key)));
        }
        if let Some(at) = at {
            self.expiries.insert((at, key));
        }
    }

    /// Drops every key whose deadline is at or before `now`; the index is
    /// ordered by deadline, so this touches only those keys.
    pub(super) fn expire_due(&mut self, now: Instant) {
        while self.expiries.first().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, key)) = self.expiries.pop_first() {
                self.map.remove(&key);
            }
        }
    }

    /// Keys stored, expired or not.
    pub(super) fn stored(&self) -> usize {
        self.map.len()
    }

    /// Every key whose value is live at `now`.
    pub(super) fn iter_live(&self, now: Instant) -> impl Iterator<Item = (&[u8], &Entry)> {
        self.map
            .iter()
            .filter(move |(_, entry)| !entry.is_expired(now))
            .map(|(key, entry)| (&**key, entry))
    }

    /// Whether the index lists exactly the keys with an expiry (tests).
    #[cfg(test)]
    pub(super) fn index_is_exact(&self) -> bool {
        let expected: BTreeSet<(Instant, Arc<[u8]>)> = self
            .map
            .iter()
            .filter_map(|(key, entry)| entry.expires_at.map(|at| (at, key.clone())))
            .collect();
        expected == self.expiries
    }

    /// How many keys the index lists (tests).
    #[cfg(test)]
    pub(super) fn indexed(&self) -> usize {
        self.expiries.len()
    }
}

/// Parses `bytes` as Redis parses an integer (`string2ll`): an optional
/// `-`, then digits without a leading zero (`0` alone is fine), fitting in
/// 64 bits. No `+`, no spaces, no `-0`.
pub(super) fn parse_integer(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, bytes),
    };
    match digits {
        [b'0'] if !negative => return Some(0),
        [b'1'..=b'9', rest @ ..] if rest.iter().all(u8::is_ascii_digit) => {}
        _ => return None,
    }
    let mut value: i64 = 0;
    for digit in digits {
        let digit = i64::from(digit - b'0');
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    Some(value)
}

/// Parses a score as Redis does (`strtod` on the whole string): a decimal
/// or exponent form, `inf`/`+inf`/`-inf` (and `infinity`); not NaN, not a
/// value out of the double range, not surrounded by spaces. Hexadecimal
/// floats, which `strtod` also reads, are refused (the scripts never send
/// one).
pub(super) fn parse_score(bytes: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(bytes).ok()?;
    if text.is_empty()
        || text.starts_with(char::is_whitespace)
        || text.ends_with(char::is_whitespace)
    {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    if value.is_nan() {
        return None;
    }
    if value.is_infinite() {
        // Only a spelled-out infinity; `1e400` overflows (ERANGE).
        let word = text.trim_start_matches(['+', '-']).to_ascii_lowercase();
        if word != "inf" && word != "infinity" {
            return None;
        }
    }
    Some(value)
}

/// Formats a double as C's `printf("%.17g")`, which is how Redis 7.0 writes
/// a score in a reply and a Lua number passed to `redis.call`.
pub(super) fn format_g17(value: f64) -> String {
    if value.is_nan() {
        return "nan".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    // The common case, fast: an integer of at most 17 digits is its own
    // %.17g (the scripts pass hold counts, TTLs and clock readings).
    if value.fract() == 0.0 && value.abs() < 1e17 {
        #[allow(clippy::cast_possible_truncation)] // integral and below 1e17: exact
        return (value as i64).to_string();
    }
    // 17 significant digits in exponent form tell the decimal exponent
    // after rounding, which picks %g's style.
    let scientific = format!("{value:.16e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..17).contains(&exponent) {
        let mantissa = strip_fraction_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
    } else {
        let decimals = usize::try_from(16 - exponent).unwrap_or(0);
        strip_fraction_zeros(&format!("{value:.decimals$}")).to_owned()
    }
}

/// `1.2500` → `1.25`, `3.000` → `3` (what %g does to the fraction).
fn strip_fraction_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

/// A score as Redis 7.0 replies with it: `%.17g`, infinities as `inf` and
/// `-inf`, and zero as `0`.
pub(super) fn format_score(score: f64) -> String {
    if score == 0.0 {
        return "0".to_owned();
    }
    format_g17(score)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_as_redis_parses_them() {
        for (text, value) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("-7", Some(-7)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-0", None),
            ("07", None),
            ("+7", None),
            (" 7", None),
            ("7 ", None),
            ("", None),
            ("-", None),
            ("1.5", None),
            ("1e3", None),
        ] {
            assert_eq!(parse_integer(text.as_bytes()), value, "{text:?}");
        }
    }

    #[test]
    fn scores_parse_as_strtod_does() {
        for (text, value) in [
            ("1", Some(1.0)),
            ("-2.5", Some(-2.5)),
            (".5", Some(0.5)),
            ("3.", Some(3.0)),
            ("+3", Some(3.0)),
            ("1e20", Some(1e20)),
            ("inf", Some(f64::INFINITY)),
            ("-inf", Some(f64::NEG_INFINITY)),
            ("+inf", Some(f64::INFINITY)),
            ("nan", None),
            ("1e400", None),
            ("abc", None),
            (" 1", None),
            ("", None),
        ] {
            assert_eq!(parse_score(text.as_bytes()), value, "{text:?}");
        }
    }

    #[test]
    fn doubles_format_as_printf_g17() {
        for (value, text) in [
            (5.0, "5"),
            (5.5, "5.5"),
            (0.1, "0.10000000000000001"),
            (1e20, "1e+20"),
            (1e17, "1e+17"),
            (1e16, "10000000000000000"),
            (123_456_789_012.0, "123456789012"),
            (1e-5, "1.0000000000000001e-05"),
            (0.0001, "0.0001"),
            (-1.6, "-1.6000000000000001"),
            (1.2345678901234567e19, "1.2345678901234567e+19"),
            (-0.0, "-0"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(format_g17(value), text, "{value}");
        }
        assert_eq!(format_score(-0.0), "0");
        assert_eq!(format_score(f64::NEG_INFINITY), "-inf");
    }
}
