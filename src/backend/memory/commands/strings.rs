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
