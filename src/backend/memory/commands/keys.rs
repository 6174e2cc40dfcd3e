//! Commands on any key: DEL, UNLINK, EXISTS, TYPE, the expiry family
//! (PTTL, TTL, PEXPIRE, EXPIRE, PEXPIREAT, EXPIREAT, PERSIST).

use super::*;

pub(super) fn del(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let mut deleted = 0;
    for key in args {
        if store.keys.exists(key, store.now) {
            store.keys.remove(key);
            deleted += 1;
        }
    }
    Ok(count(deleted))
}

pub(super) fn exists(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let now = store.now;
    Ok(count(
        args.iter()
            .filter(|key| store.keys.exists(key, now))
            .count(),
    ))
}

pub(super) fn pttl(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let now = store.now;
    Ok(Reply::Int(match store.keys.live(args[0], now) {
        None => -2,
        Some(entry) => entry.expires_at().map_or(-1, |at| {
            i64::try_from(at.saturating_duration_since(now).as_millis()).unwrap_or(i64::MAX)
        }),
    }))
}

/// TYPE: a status reply (`+hash`, which Lua sees as `{ok='hash'}`), `none`
/// when absent.
pub(super) fn type_of(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let name = match store.keys.live(args[0], store.now) {
        None => "none",
        Some(entry) => match entry.value {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
            Value::ZSet(_) => "zset",
            Value::Set(_) => "set",
        },
    };
    Ok(Reply::Status(name.to_owned()))
}

/// TTL: PTTL in seconds, rounded to the nearest (Redis' `(ttl+500)/1000`).
pub(super) fn ttl(store: &mut Store, args: &[&[u8]]) -> Outcome {
    match pttl(store, args)? {
        Reply::Int(ms) if ms >= 0 => Ok(Reply::Int(ms.saturating_add(500) / 1000)),
        other => Ok(other),
    }
}

pub(super) fn pexpire(store: &mut Store, args: &[&[u8]]) -> Outcome {
    expire_generic(store, args, "pexpire", 1, false)
}

pub(super) fn expire(store: &mut Store, args: &[&[u8]]) -> Outcome {
    expire_generic(store, args, "expire", 1000, false)
}

pub(super) fn pexpireat(store: &mut Store, args: &[&[u8]]) -> Outcome {
    expire_generic(store, args, "pexpireat", 1, true)
}

pub(super) fn expireat(store: &mut Store, args: &[&[u8]]) -> Outcome {
    expire_generic(store, args, "expireat", 1000, true)
}

/// The EXPIRE family as Redis' `expireGenericCommand`: the time in `unit`
/// ms, from now or (`absolute`) from the epoch; overflow refused with the
/// command's `name`; a deadline at or before now deletes the key.
fn expire_generic(
    store: &mut Store,
    args: &[&[u8]],
    name: &str,
    unit: i64,
    absolute: bool,
) -> Outcome {
    if let Some(option) = args.get(2) {
        // NX, XX, GT and LT (parsed first, as Redis does): no script uses
        // them yet.
        return Err(Reply::Error(format!(
            "ERR Unsupported option {} (MemoryBackend implements {} key time only)",
            String::from_utf8_lossy(option),
            name.to_ascii_uppercase()
        )));
    }
    let invalid = || Reply::Error(format!("ERR invalid expire time in '{name}' command"));
    let when = integer_arg(args[1])?;
    let when = when.checked_mul(unit).ok_or_else(invalid)?;
    let wall = i64::try_from(store.wall.as_millis()).unwrap_or(i64::MAX);
    // In ms from now.
    let ms = if absolute {
        when.saturating_sub(wall)
    } else {
        if expiry_overflows(store, when) {
            return Err(invalid());
        }
        when
    };
    let key = args[0];
    if !store.keys.exists(key, store.now) {
        return Ok(Reply::Int(0));
    }
    if ms <= 0 {
        // A deadline already past deletes the key, as Redis does.
        store.keys.remove(key);
    } else {
        let at = deadline(store.now, ms);
        store.keys.set_expiry(key, at);
    }
    Ok(Reply::Int(1))
}

/// PERSIST: 1 when a deadline was removed, 0 when there was none (or no
/// key).
pub(super) fn persist(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let had = store
        .keys
        .live(args[0], store.now)
        .is_some_and(|entry| entry.expires_at().is_some());
    if had {
        store.keys.set_expiry(args[0], None);
    }
    Ok(Reply::Int(i64::from(had)))
}
