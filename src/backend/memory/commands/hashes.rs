//! Hash commands.

use super::*;

pub(super) fn hget(store: &mut Store, args: &[&[u8]]) -> Outcome {
    Ok(typed(store, args[0], as_hash)?
        .and_then(|fields| fields.get(args[1]))
        .map_or(Reply::Nil, |value| bulk(value)))
}

pub(super) fn hexists(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let found = typed(store, args[0], as_hash)?.is_some_and(|fields| fields.contains_key(args[1]));
    Ok(Reply::Int(i64::from(found)))
}

pub(super) fn hset(store: &mut Store, args: &[&[u8]]) -> Outcome {
    if args.len().is_multiple_of(2) {
        return Err(error("ERR wrong number of arguments for 'hset' command"));
    }
    let fields = typed_or_insert(store, args[0], new_hash, as_hash)?;
    let mut created = 0;
    for pair in args[1..].chunks_exact(2) {
        if fields.insert(pair[0].to_vec(), pair[1].to_vec()).is_none() {
            created += 1;
        }
    }
    Ok(count(created))
}

pub(super) fn hdel(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let Some(fields) = typed(store, args[0], as_hash)? else {
        return Ok(Reply::Int(0));
    };
    let deleted = args[1..]
        .iter()
        .filter(|field| fields.remove(**field).is_some())
        .count();
    store.keys.drop_if_empty(args[0]);
    Ok(count(deleted))
}

pub(super) fn hlen(store: &mut Store, args: &[&[u8]]) -> Outcome {
    Ok(count(
        typed(store, args[0], as_hash)?.map_or(0, |fields| fields.len()),
    ))
}

pub(super) fn hkeys(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let fields = typed(store, args[0], as_hash)?;
    let mut keys: Vec<&Vec<u8>> = fields
        .map(|fields| fields.keys().collect())
        .unwrap_or_default();
    // A HashMap has no order; Redis' is insertion order. Sorted at least
    // makes a run reproducible.
    keys.sort();
    Ok(Reply::Array(
        keys.into_iter().map(|key| bulk(key)).collect(),
    ))
}

pub(super) fn hincrby(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let by = integer_arg(args[2])?;
    let key = args[0];
    let fields = typed_or_insert(store, key, new_hash, as_hash)?;
    let outcome = match fields.get_mut(args[1]) {
        None => {
            fields.insert(args[1].to_vec(), by.to_string().into_bytes());
            Ok(Reply::Int(by))
        }
        Some(value) => parse_integer(value)
            .ok_or_else(|| error(HASH_NOT_INTEGER))
            .and_then(|old| old.checked_add(by).ok_or_else(|| error(OVERFLOW)))
            .map(|new| {
                *value = new.to_string().into_bytes();
                Reply::Int(new)
            }),
    };
    store.keys.drop_if_empty(key);
    outcome
}

/// HSETNX: 1 when the field was set, 0 when it was there.
pub(super) fn hsetnx(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let fields = typed_or_insert(store, args[0], new_hash, as_hash)?;
    if fields.contains_key(args[1]) {
        return Ok(Reply::Int(0));
    }
    fields.insert(args[1].to_vec(), args[2].to_vec());
    Ok(Reply::Int(1))
}

/// The hash's fields and values in field order (Redis' order is its
/// table's; a script that needs one sorts).
fn sorted_fields(fields: Option<&mut FastMap<Vec<u8>, Vec<u8>>>) -> Vec<(&[u8], &[u8])> {
    let mut pairs: Vec<(&[u8], &[u8])> = fields
        .map(|fields| {
            fields
                .iter()
                .map(|(field, value)| (field.as_slice(), value.as_slice()))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort_unstable();
    pairs
}

pub(super) fn hvals(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let pairs = sorted_fields(typed(store, args[0], as_hash)?);
    Ok(Reply::Array(
        pairs.into_iter().map(|(_, value)| bulk(value)).collect(),
    ))
}

pub(super) fn hgetall(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let pairs = sorted_fields(typed(store, args[0], as_hash)?);
    Ok(Reply::Array(
        pairs
            .into_iter()
            .flat_map(|(field, value)| [bulk(field), bulk(value)])
            .collect(),
    ))
}

pub(super) fn hmget(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let fields = typed(store, args[0], as_hash)?;
    Ok(Reply::Array(
        args[1..]
            .iter()
            .map(|field| {
                fields
                    .as_ref()
                    .and_then(|fields| fields.get(*field))
                    .map_or(Reply::Nil, |value| bulk(value))
            })
            .collect(),
    ))
}

pub(super) fn hstrlen(store: &mut Store, args: &[&[u8]]) -> Outcome {
    Ok(count(
        typed(store, args[0], as_hash)?
            .and_then(|fields| fields.get(args[1]))
            .map_or(0, Vec::len),
    ))
}

/// HINCRBYFLOAT: INCRBYFLOAT's arithmetic on a field; the increment is
/// read first, then the key's type, then the field, as Redis does.
pub(super) fn hincrbyfloat(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let by = super::strings::parse_float(args[2]).ok_or_else(|| error(NOT_FLOAT))?;
    let key = args[0];
    let fields = typed_or_insert(store, key, new_hash, as_hash)?;
    let outcome = match fields.get(args[1]) {
        None => Ok(super::strings::Float::ZERO),
        Some(value) => {
            super::strings::parse_float(value).ok_or_else(|| error("ERR hash value is not a float"))
        }
    }
    .and_then(|base| {
        super::strings::float_sum(base, by, "HINCRBYFLOAT", "ERR value is NaN or Infinity")
    })
    .map(|sum| {
        fields.insert(args[1].to_vec(), sum.clone().into_bytes());
        Reply::Bulk(sum.into_bytes())
    });
    store.keys.drop_if_empty(key);
    outcome
}
