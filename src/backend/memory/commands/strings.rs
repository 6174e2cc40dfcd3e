//! String commands: GET, SET, INCR and its kin, INCRBYFLOAT (whose
//! arithmetic is `float.rs`'s).

use super::float::{Float, float_sum, parse_float};
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
