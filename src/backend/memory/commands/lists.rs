//! List commands, and the index arithmetic LRANGE and ZRANGE share.

use super::*;

/// The position of `index` (negative: from the end) in a list of `len`.
pub(super) fn list_position(len: usize, index: i64) -> Option<usize> {
    let len = i64::try_from(len).ok()?;
    let index = if index < 0 {
        index.checked_add(len)?
    } else {
        index
    };
    if (0..len).contains(&index) {
        usize::try_from(index).ok()
    } else {
        None
    }
}

/// `start..=stop` (negative: from the end) clamped to a list of `len`, as
/// LRANGE and ZRANGE read it; `None` when empty.
pub(super) fn range(len: usize, start: i64, stop: i64) -> Option<(usize, usize)> {
    let len = i64::try_from(len).ok()?;
    let start = if start < 0 {
        start.saturating_add(len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        stop.saturating_add(len)
    } else {
        stop
    };
    if start > stop || start >= len {
        return None;
    }
    let stop = stop.min(len - 1);
    Some((usize::try_from(start).ok()?, usize::try_from(stop).ok()?))
}

pub(super) fn lindex(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let Some(items) = typed(store, args[0], as_list)? else {
        return Ok(Reply::Nil);
    };
    let index = integer_arg(args[1])?;
    Ok(list_position(items.len(), index)
        .and_then(|at| items.get(at))
        .map_or(Reply::Nil, |item| bulk(item)))
}

pub(super) fn lpop(store: &mut Store, args: &[&[u8]]) -> Outcome {
    pop(store, args, "lpop", true)
}

pub(super) fn rpop(store: &mut Store, args: &[&[u8]]) -> Outcome {
    pop(store, args, "rpop", false)
}

/// LPOP and RPOP as Redis' `popGenericCommand`: arity, then the count,
/// then the key; with a count, an array (nil when the key is absent).
fn pop(store: &mut Store, args: &[&[u8]], name: &str, head: bool) -> Outcome {
    if args.len() > 2 {
        return Err(Reply::Error(format!(
            "ERR wrong number of arguments for '{name}' command"
        )));
    }
    let wanted = match args.get(1) {
        None => None,
        Some(arg) => Some(
            usize::try_from(integer_arg(arg)?)
                .map_err(|_| error("ERR value is out of range, must be positive"))?,
        ),
    };
    let key = args[0];
    let Some(items) = typed(store, key, as_list)? else {
        return Ok(Reply::Nil);
    };
    let reply = match wanted {
        None => if head {
            items.pop_front()
        } else {
            items.pop_back()
        }
        .map_or(Reply::Nil, Reply::Bulk),
        Some(n) => {
            let n = n.min(items.len());
            Reply::Array(if head {
                items.drain(..n).map(Reply::Bulk).collect()
            } else {
                let from = items.len() - n;
                items.drain(from..).rev().map(Reply::Bulk).collect()
            })
        }
    };
    store.keys.drop_if_empty(key);
    Ok(reply)
}

pub(super) fn rpush(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let items = typed_or_insert(store, args[0], new_list, as_list)?;
    items.extend(args[1..].iter().map(|item| item.to_vec()));
    Ok(count(items.len()))
}

pub(super) fn lrange(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let start = integer_arg(args[1])?;
    let stop = integer_arg(args[2])?;
    let Some(items) = typed(store, args[0], as_list)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    Ok(Reply::Array(match range(items.len(), start, stop) {
        None => Vec::new(),
        Some((from, to)) => items.range(from..=to).map(|item| bulk(item)).collect(),
    }))
}

pub(super) fn lrem(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let limit = integer_arg(args[1])?;
    let key = args[0];
    let Some(items) = typed(store, key, as_list)? else {
        return Ok(Reply::Int(0));
    };
    let wanted = args[2];
    let most = if limit == 0 {
        usize::MAX
    } else {
        usize::try_from(limit.unsigned_abs()).unwrap_or(usize::MAX)
    };
    let mut removed = 0;
    if limit >= 0 {
        let mut i = 0;
        while i < items.len() && removed < most {
            if items[i] == wanted {
                items.remove(i);
                removed += 1;
            } else {
                i += 1;
            }
        }
    } else {
        let mut i = items.len();
        while i > 0 && removed < most {
            i -= 1;
            if items[i] == wanted {
                items.remove(i);
                removed += 1;
            }
        }
    }
    store.keys.drop_if_empty(key);
    Ok(count(removed))
}

/// LPUSH: each item in turn at the head; the new length.
pub(super) fn lpush(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let items = typed_or_insert(store, args[0], new_list, as_list)?;
    for item in &args[1..] {
        items.push_front(item.to_vec());
    }
    Ok(count(items.len()))
}

pub(super) fn llen(store: &mut Store, args: &[&[u8]]) -> Outcome {
    Ok(count(
        typed(store, args[0], as_list)?.map_or(0, |items| items.len()),
    ))
}

/// LSET: the key first (`ERR no such key` when absent), then the index.
pub(super) fn lset(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let Some(items) = typed(store, args[0], as_list)? else {
        return Err(error("ERR no such key"));
    };
    let index = integer_arg(args[1])?;
    let at = list_position(items.len(), index).ok_or_else(|| error("ERR index out of range"))?;
    items[at] = args[2].to_vec();
    Ok(ok())
}

/// LTRIM: keeps `start..=stop` (as LRANGE reads it); an empty list goes.
pub(super) fn ltrim(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let start = integer_arg(args[1])?;
    let stop = integer_arg(args[2])?;
    let key = args[0];
    let Some(items) = typed(store, key, as_list)? else {
        return Ok(ok());
    };
    match range(items.len(), start, stop) {
        None => items.clear(),
        Some((from, to)) => {
            items.truncate(to + 1);
            items.drain(..from);
        }
    }
    store.keys.drop_if_empty(key);
    Ok(ok())
}
