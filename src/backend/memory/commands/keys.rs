//! Commands on any key: DEL, EXISTS, PTTL, TYPE, PEXPIRE.

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
        },
    };
    Ok(Reply::Status(name.to_owned()))
}

pub(super) fn pexpire(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let ms = integer_arg(args[1])?;
    if expiry_overflows(store, ms) {
        return Err(error("ERR invalid expire time in 'pexpire' command"));
    }
    if let Some(option) = args.get(2) {
        // NX, XX, GT and LT: no script uses them.
        return Err(Reply::Error(format!(
            "ERR Unsupported option {} (MemoryBackend implements PEXPIRE key milliseconds only)",
            String::from_utf8_lossy(option)
        )));
    }
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
