//! String commands: GET, SET, INCR and its kin.

use super::*;

pub(super) fn get(store: &mut Store, args: &[&[u8]]) -> Outcome {
    Ok(typed(store, args[0], as_str)?.map_or(Reply::Nil, |value| bulk(value)))
}

pub(super) fn set(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let mut expires_at = None;
    let mut only_if_absent = false;
    let mut options = args[2..].iter();
    while let Some(option) = options.next() {
        if option.eq_ignore_ascii_case(b"px") {
            let ms = integer_arg(options.next().ok_or_else(|| error(SYNTAX))?)?;
            if ms <= 0 || expiry_overflows(store, ms) {
                return Err(error("ERR invalid expire time in 'set' command"));
            }
            expires_at = deadline(store.now, ms);
        } else if option.eq_ignore_ascii_case(b"nx") {
            only_if_absent = true;
        } else {
            // EX, XX, KEEPTTL, GET...: no script uses them.
            return Err(error(SYNTAX));
        }
    }
    // NX: a key that exists (of any type) is left alone; the reply is nil.
    if only_if_absent && store.keys.exists(args[0], store.now) {
        return Ok(Reply::Nil);
    }
    store
        .keys
        .insert(args[0], Value::Str(args[1].to_vec()), expires_at);
    Ok(ok())
}

pub(super) fn incrby(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let by = integer_arg(args[1])?;
    incr_by(store, args[0], by)
}

pub(super) fn decrby(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let by = integer_arg(args[1])?;
    let by = by
        .checked_neg()
        .ok_or_else(|| error("ERR decrement would overflow"))?;
    incr_by(store, args[0], by)
}

/// INCRBY: the string at `key` (absent = 0) plus `by`, stored as decimal
/// text; the key keeps its expiry.
pub(super) fn incr_by(store: &mut Store, key: &[u8], by: i64) -> Outcome {
    let now = store.now;
    match store.keys.live(key, now) {
        None => {
            store
                .keys
                .insert(key, Value::Str(by.to_string().into_bytes()), None);
            Ok(Reply::Int(by))
        }
        Some(entry) => {
            let value = as_str(&mut entry.value).ok_or_else(|| error(WRONGTYPE))?;
            let old = parse_integer(value).ok_or_else(|| error(NOT_INTEGER))?;
            let new = old.checked_add(by).ok_or_else(|| error(OVERFLOW))?;
            *value = new.to_string().into_bytes();
            Ok(Reply::Int(new))
        }
    }
}

/// SETNX: SET NX with an integer reply.
pub(super) fn setnx(store: &mut Store, args: &[&[u8]]) -> Outcome {
    if store.keys.exists(args[0], store.now) {
        return Ok(Reply::Int(0));
    }
    store
        .keys
        .insert(args[0], Value::Str(args[1].to_vec()), None);
    Ok(Reply::Int(1))
}

/// GETSET: the old string (nil when absent), then SET (the TTL goes).
pub(super) fn getset(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let old = get(store, args)?;
    store
        .keys
        .insert(args[0], Value::Str(args[1].to_vec()), None);
    Ok(old)
}

/// GETDEL: the string, deleted; nil when absent.
pub(super) fn getdel(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let value = get(store, args)?;
    if value != Reply::Nil {
        store.keys.remove(args[0]);
    }
    Ok(value)
}

pub(super) fn strlen(store: &mut Store, args: &[&[u8]]) -> Outcome {
    Ok(count(
        typed(store, args[0], as_str)?.map_or(0, |value| value.len()),
    ))
}

/// APPEND: the new length; the key keeps its TTL.
pub(super) fn append(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let value = typed_or_insert(store, args[0], || Value::Str(Vec::new()), as_str)?;
    value.extend_from_slice(args[1]);
    Ok(count(value.len()))
}

/// MGET: each key's string, nil for one absent or of another type.
pub(super) fn mget(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let now = store.now;
    Ok(Reply::Array(
        args.iter()
            .map(|key| match store.keys.live(key, now) {
                Some(entry) => as_str(&mut entry.value).map_or(Reply::Nil, |value| bulk(value)),
                None => Reply::Nil,
            })
            .collect(),
    ))
}

/// MSET: SET of each pair (their TTLs go).
pub(super) fn mset(store: &mut Store, args: &[&[u8]]) -> Outcome {
    if !args.len().is_multiple_of(2) {
        return Err(error("ERR wrong number of arguments for 'mset' command"));
    }
    for pair in args.chunks_exact(2) {
        store
            .keys
            .insert(pair[0], Value::Str(pair[1].to_vec()), None);
    }
    Ok(ok())
}

/// INCRBYFLOAT: the string at `key` (absent = 0) plus the increment, in
/// Redis' long double arithmetic (see [`float_sum`]); the key keeps its
/// TTL.
pub(super) fn incrbyfloat(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let key = args[0];
    let now = store.now;
    let old = match store.keys.live(key, now) {
        None => None,
        Some(entry) => Some(
            as_str(&mut entry.value)
                .ok_or_else(|| error(WRONGTYPE))?
                .clone(),
        ),
    };
    let base = match &old {
        None => Float::ZERO,
        Some(text) => parse_float(text).ok_or_else(|| error(NOT_FLOAT))?,
    };
    let by = parse_float(args[1]).ok_or_else(|| error(NOT_FLOAT))?;
    let sum = float_sum(
        base,
        by,
        "INCRBYFLOAT",
        "ERR increment would produce NaN or Infinity",
    )?;
    match store.keys.live(key, now) {
        Some(entry) => entry.value = Value::Str(sum.clone().into_bytes()),
        None => store
            .keys
            .insert(key, Value::Str(sum.clone().into_bytes()), None),
    }
    Ok(Reply::Bulk(sum.into_bytes()))
}

/// A number as Redis' `string2ld` reads it (`strtold` on the whole
/// string), in the part of its range this store computes exactly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Float {
    /// `units / 10^17`: at most 17 decimals, below 10^18 in magnitude.
    Exact(i128),
    /// `inf` or `infinity` (any case, signed): every sum is refused.
    Infinite,
    /// One Redis reads (a hexadecimal float, more than 17 decimals, a
    /// larger magnitude) whose long double sum this store cannot
    /// reproduce digit for digit.
    Beyond,
}

impl Float {
    pub(super) const ZERO: Float = Float::Exact(0);
}

/// The scale of [`Float::Exact`].
const UNITS: i128 = 100_000_000_000_000_000;

/// Parses `bytes` as `string2ld` does: `None` where Redis refuses it (not a
/// number, NaN, a space before or after, empty).
pub(super) fn parse_float(bytes: &[u8]) -> Option<Float> {
    let text = std::str::from_utf8(bytes).ok()?;
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let negative = text.starts_with('-');
    let word = unsigned.to_ascii_lowercase();
    if word == "inf" || word == "infinity" {
        return Some(Float::Infinite);
    }
    if word.starts_with("0x") {
        // A hexadecimal float `strtold` reads (or refuses): not reproduced.
        return Some(Float::Beyond);
    }
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => {
            let exponent = &unsigned[at + 1..];
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (&unsigned[..at], exponent.parse::<i64>().unwrap_or(i64::MAX))
        }
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let digits: String = whole.chars().chain(fraction.chars()).collect();
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Some(Float::ZERO);
    }
    // value = digits × 10^shift / 10^17
    let shift = exponent
        .saturating_sub(i64::try_from(fraction.len()).unwrap_or(i64::MAX))
        .saturating_add(17);
    let trimmed = digits.trim_end_matches('0');
    let shift = shift.saturating_add(i64::try_from(digits.len() - trimmed.len()).unwrap_or(0));
    if shift < 0 || trimmed.len() > 36 {
        return Some(Float::Beyond);
    }
    // Below 10^18 in magnitude: 10^35 units.
    let cap = UNITS * 1_000_000_000_000_000_000;
    let mut units: i128 = trimmed.parse().ok()?;
    for _ in 0..shift {
        match units.checked_mul(10) {
            Some(more) if more < cap => units = more,
            _ => return Some(Float::Beyond),
        }
    }
    if units >= cap {
        return Some(Float::Beyond);
    }
    Some(Float::Exact(if negative { -units } else { units }))
}

/// `a + b` as Redis computes it in a long double and writes it (`%.17Lf`,
/// trailing zeros and point dropped, `-0` as `0`); `infinite` is
/// `command`'s error for an infinite sum.
///
/// Exact decimal arithmetic gives Redis' digits where the long double's
/// rounding cannot show in 17 decimals: when every value is below 90 in
/// sum of magnitudes (the long double's error, 2^-64 of each, stays under
/// half the last decimal), or when every value is exact in a long double
/// (a 64-bit mantissa). Elsewhere Redis' digits carry its binary rounding
/// (`10000000000.1` prints with noise), which this store does not
/// reproduce: it refuses, saying so, rather than answer other digits.
pub(super) fn float_sum(
    a: Float,
    b: Float,
    command: &str,
    infinite: &str,
) -> Result<String, Reply> {
    let (a, b) = match (a, b) {
        (Float::Infinite, _) | (_, Float::Infinite) => return Err(error(infinite)),
        (Float::Exact(a), Float::Exact(b)) => (a, b),
        _ => return Err(beyond(command)),
    };
    let sum = a + b;
    let small = a.unsigned_abs() + b.unsigned_abs() + sum.unsigned_abs() < 90 * UNITS as u128;
    let exact = exact_in_long_double(a) && exact_in_long_double(b) && exact_in_long_double(sum);
    if !(small || exact) {
        return Err(beyond(command));
    }
    let magnitude = sum.unsigned_abs();
    let whole = magnitude / UNITS as u128;
    let fraction = magnitude % UNITS as u128;
    let mut text = if sum < 0 {
        "-".to_owned()
    } else {
        String::new()
    };
    text.push_str(&whole.to_string());
    if fraction != 0 {
        let digits = format!("{fraction:017}");
        text.push('.');
        text.push_str(digits.trim_end_matches('0'));
    }
    Ok(text)
}

/// Whether `units / 10^17` is a long double exactly: a multiple of 2^-17
/// (so of 5^17 units) whose odd part fits in 64 bits.
fn exact_in_long_double(units: i128) -> bool {
    const FIVE_17: u128 = 762_939_453_125;
    let magnitude = units.unsigned_abs();
    if !magnitude.is_multiple_of(FIVE_17) {
        return false;
    }
    let odd = magnitude / FIVE_17;
    (odd >> odd.trailing_zeros().min(127)) <= u128::from(u64::MAX)
}

fn beyond(command: &str) -> Reply {
    Reply::Error(format!(
        "ERR MemoryBackend cannot reproduce Redis' long double result of {command} here \
         (it computes sums below 90 in magnitude with at most 17 decimals, and values \
         exact in binary)"
    ))
}
