//! Redis' long double arithmetic of INCRBYFLOAT and HINCRBYFLOAT, computed
//! exactly where its digits can be, refused (loudly) where they cannot.

use super::*;

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
