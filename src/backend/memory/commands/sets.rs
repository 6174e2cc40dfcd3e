//! Set commands: SADD, SREM, SMEMBERS, SCARD, SISMEMBER, SMISMEMBER.

use super::*;

fn as_set(value: &mut Value) -> Option<&mut FastSet<Vec<u8>>> {
    match value {
        Value::Set(members) => Some(members),
        _ => None,
    }
}

fn new_set() -> Value {
    Value::Set(FastSet::default())
}

pub(super) fn sadd(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let members = typed_or_insert(store, args[0], new_set, as_set)?;
    Ok(count(
        args[1..]
            .iter()
            .filter(|member| members.insert(member.to_vec()))
            .count(),
    ))
}

pub(super) fn srem(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let Some(members) = typed(store, args[0], as_set)? else {
        return Ok(Reply::Int(0));
    };
    let removed = args[1..]
        .iter()
        .filter(|member| members.remove(**member))
        .count();
    store.keys.drop_if_empty(args[0]);
    Ok(count(removed))
}

/// SMEMBERS in byte order (Redis' order is its table's; a script that
/// needs one sorts).
pub(super) fn smembers(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let mut members: Vec<&Vec<u8>> = typed(store, args[0], as_set)?
        .map(|members| members.iter().collect())
        .unwrap_or_default();
    members.sort_unstable();
    Ok(Reply::Array(
        members.into_iter().map(|member| bulk(member)).collect(),
    ))
}

pub(super) fn scard(store: &mut Store, args: &[&[u8]]) -> Outcome {
    Ok(count(
        typed(store, args[0], as_set)?.map_or(0, |members| members.len()),
    ))
}

pub(super) fn sismember(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let found = typed(store, args[0], as_set)?.is_some_and(|members| members.contains(args[1]));
    Ok(Reply::Int(i64::from(found)))
}

pub(super) fn smismember(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let members = typed(store, args[0], as_set)?;
    Ok(Reply::Array(
        args[1..]
            .iter()
            .map(|member| {
                Reply::Int(i64::from(
                    members
                        .as_ref()
                        .is_some_and(|members| members.contains(*member)),
                ))
            })
            .collect(),
    ))
}
