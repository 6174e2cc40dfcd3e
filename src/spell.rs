//! Numbers written into strings without `fmt`'s machinery, for the key
//! names, ids and arguments spelled on every lock call (a `format!` costs
//! the client about a thousand instructions more than these loops).

/// Appends `n` in lower-case hex, as `{n:x}` writes it (no formatting
/// machinery: for ids spelled on every call).
pub(crate) fn push_hex(out: &mut String, n: u64) {
    // At least one digit (0 is "0"), none leading.
    let bits = 64 - n.leading_zeros().min(60) as usize / 4 * 4;
    for shift in (0..bits).step_by(4).rev() {
        out.push(char::from(
            b"0123456789abcdef"[((n >> shift) & 0xf) as usize],
        ));
    }
}

/// Appends `n` in decimal, as `{n}` writes it.
pub(crate) fn push_decimal(out: &mut String, n: i64) {
    if n < 0 {
        out.push('-');
    }
    push_unsigned(out, n.unsigned_abs());
}

/// Appends `n` in decimal, as `{n}` writes it.
pub(crate) fn push_unsigned(out: &mut String, n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for &digit in &digits[at..] {
        out.push(char::from(digit));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_format_writes_them() {
        for n in [
            0,
            1,
            9,
            10,
            15,
            16,
            255,
            256,
            0xdead_beef,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut out = String::from("x");
            push_hex(&mut out, n);
            assert_eq!(out, format!("x{n:x}"));
        }
        for n in [0, 1, 9, 10, 99, 100, -1, -10, 30_000, i64::MAX, i64::MIN] {
            let mut out = String::from("x");
            push_decimal(&mut out, n);
            assert_eq!(out, format!("x{n}"));
        }
        let mut out = String::new();
        push_unsigned(&mut out, u64::MAX);
        assert_eq!(out, u64::MAX.to_string());
    }
}
