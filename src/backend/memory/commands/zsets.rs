//! Sorted-set commands: members ordered by score, then by bytes.

use super::*;

pub(super) fn score_arg(arg: &[u8]) -> Result<f64, Reply> {
    parse_score(arg).ok_or_else(|| error(NOT_FLOAT))
}

pub(super) fn score_reply(score: f64) -> Reply {
    Reply::Bulk(format_score(score).into_bytes())
}

/// The members in Redis' order: by score, then by member bytes.
pub(super) fn ordered(members: &FastMap<Vec<u8>, f64>) -> Vec<(&[u8], f64)> {
    let mut sorted: Vec<(&[u8], f64)> = members
        .iter()
        .map(|(member, score)| (member.as_slice(), *score))
        .collect();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    sorted
}

pub(super) fn with_scores(members: &[(&[u8], f64)], scores: bool) -> Reply {
    let mut items = Vec::with_capacity(members.len() * if scores { 2 } else { 1 });
    for (member, score) in members {
        items.push(bulk(member));
        if scores {
            items.push(score_reply(*score));
        }
    }
    Reply::Array(items)
}

pub(super) fn zadd(store: &mut Store, args: &[&[u8]]) -> Outcome {
    // NX (only add new members) is the one flag a script uses.
    let nx = args
        .get(1)
        .is_some_and(|flag| flag.eq_ignore_ascii_case(b"nx"));
    let pairs = &args[1 + usize::from(nx)..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        // Also where XX, GT, LT, CH or INCR would be: no script uses them.
        return Err(error(SYNTAX));
    }
    let scores = pairs
        .chunks_exact(2)
        .map(|pair| score_arg(pair[0]))
        .collect::<Result<Vec<f64>, Reply>>()?;
    let members = typed_or_insert(store, args[0], new_zset, as_zset)?;
    let mut added = 0;
    for (pair, score) in pairs.chunks_exact(2).zip(scores) {
        if nx && members.contains_key(pair[1]) {
            continue;
        }
        if members.insert(pair[1].to_vec(), score).is_none() {
            added += 1;
        }
    }
    Ok(count(added))
}

pub(super) fn zincrby(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let by = score_arg(args[1])?;
    let key = args[0];
    let members = typed_or_insert(store, key, new_zset, as_zset)?;
    let score = members.get(args[2]).copied().unwrap_or(0.0) + by;
    let outcome = if score.is_nan() {
        Err(error("ERR resulting score is not a number (NaN)"))
    } else {
        members.insert(args[2].to_vec(), score);
        Ok(score_reply(score))
    };
    store.keys.drop_if_empty(key);
    outcome
}

/// ZPOPMIN without COUNT (no script uses it): the first member and its
/// score, removed; an empty array when there is none.
pub(super) fn zpopmin(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let Some(members) = typed(store, args[0], as_zset)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let first = ordered(members)
        .first()
        .map(|(member, score)| (member.to_vec(), *score));
    let Some((member, score)) = first else {
        return Ok(Reply::Array(Vec::new()));
    };
    members.remove(&member);
    store.keys.drop_if_empty(args[0]);
    Ok(Reply::Array(vec![Reply::Bulk(member), score_reply(score)]))
}

pub(super) fn zrem(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let Some(members) = typed(store, args[0], as_zset)? else {
        return Ok(Reply::Int(0));
    };
    let removed = args[1..]
        .iter()
        .filter(|member| members.remove(**member).is_some())
        .count();
    store.keys.drop_if_empty(args[0]);
    Ok(count(removed))
}

pub(super) fn zcard(store: &mut Store, args: &[&[u8]]) -> Outcome {
    Ok(count(
        typed(store, args[0], as_zset)?.map_or(0, |members| members.len()),
    ))
}

pub(super) fn zscore(store: &mut Store, args: &[&[u8]]) -> Outcome {
    Ok(typed(store, args[0], as_zset)?
        .and_then(|members| members.get(args[1]).copied())
        .map_or(Reply::Nil, score_reply))
}

pub(super) fn zrange(store: &mut Store, args: &[&[u8]]) -> Outcome {
    rank_range(store, args, false)
}

pub(super) fn zrevrange(store: &mut Store, args: &[&[u8]]) -> Outcome {
    rank_range(store, args, true)
}

/// ZRANGE and ZREVRANGE by rank: the options first, then the range, then
/// the key, as Redis' `zrangeGenericCommand` reads them.
fn rank_range(store: &mut Store, args: &[&[u8]], reverse: bool) -> Outcome {
    let scores = match &args[3..] {
        [] => false,
        [option] if option.eq_ignore_ascii_case(b"withscores") => true,
        // BYSCORE, BYLEX, REV, LIMIT: not implemented (ZRANGEBYSCORE,
        // ZREVRANGE are).
        _ => return Err(error(SYNTAX)),
    };
    let start = integer_arg(args[1])?;
    let stop = integer_arg(args[2])?;
    let Some(members) = typed(store, args[0], as_zset)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let mut sorted = ordered(members);
    if reverse {
        sorted.reverse();
    }
    Ok(match super::lists::range(sorted.len(), start, stop) {
        None => Reply::Array(Vec::new()),
        Some((from, to)) => with_scores(&sorted[from..=to], scores),
    })
}

/// A score range bound: the score, and whether it is exclusive (`(`).
/// Read as Redis' `zslParseRange` reads it, with `strtod` and no range
/// check: spaces before the number are skipped, nothing at all is 0 (`(`
/// alone: above 0), a number beyond the double range is infinite; NaN is
/// refused.
fn score_bound(arg: &[u8]) -> Result<(f64, bool), Reply> {
    let (exclusive, number) = match arg.split_first() {
        Some((b'(', rest)) => (true, rest),
        _ => (false, arg),
    };
    if number.is_empty() {
        return Ok((0.0, exclusive));
    }
    let text = std::str::from_utf8(number).map_err(|_| error(MIN_MAX))?;
    let text = text.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    match text.parse::<f64>() {
        Ok(score) if !score.is_nan() && !text.starts_with(['i', 'I', 'n', 'N']) => {
            Ok((score, exclusive))
        }
        // Spelled-out infinities only as `strtod` reads them.
        _ => parse_score(text.as_bytes())
            .map(|score| (score, exclusive))
            .ok_or_else(|| error(MIN_MAX)),
    }
}

/// A score range, `min` and `max` as ZRANGEBYSCORE reads them.
struct ScoreRange {
    min: (f64, bool),
    max: (f64, bool),
}

impl ScoreRange {
    fn parse(min: &[u8], max: &[u8]) -> Result<ScoreRange, Reply> {
        Ok(ScoreRange {
            min: score_bound(min)?,
            max: score_bound(max)?,
        })
    }

    fn contains(&self, score: f64) -> bool {
        let ((min, min_exclusive), (max, max_exclusive)) = (self.min, self.max);
        (if min_exclusive {
            score > min
        } else {
            score >= min
        }) && (if max_exclusive {
            score < max
        } else {
            score <= max
        })
    }
}

pub(super) fn zrangebyscore(store: &mut Store, args: &[&[u8]]) -> Outcome {
    score_range(store, args, false)
}

pub(super) fn zrevrangebyscore(store: &mut Store, args: &[&[u8]]) -> Outcome {
    score_range(store, args, true)
}

/// ZRANGEBYSCORE (`key min max`) and ZREVRANGEBYSCORE (`key max min`): the
/// options first (WITHSCORES, LIMIT offset count), then the range, then
/// the key, as Redis reads them.
fn score_range(store: &mut Store, args: &[&[u8]], reverse: bool) -> Outcome {
    let mut scores = false;
    let mut limit: Option<(i64, i64)> = None;
    let mut options = args[3..].iter();
    while let Some(option) = options.next() {
        if option.eq_ignore_ascii_case(b"withscores") {
            scores = true;
        } else if option.eq_ignore_ascii_case(b"limit") && options.len() >= 2 {
            let (Some(offset), Some(n)) = (options.next(), options.next()) else {
                return Err(error(SYNTAX));
            };
            limit = Some((integer_arg(offset)?, integer_arg(n)?));
        } else {
            return Err(error(SYNTAX));
        }
    }
    let range = if reverse {
        ScoreRange::parse(args[2], args[1])?
    } else {
        ScoreRange::parse(args[1], args[2])?
    };
    let Some(members) = typed(store, args[0], as_zset)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let mut sorted: Vec<(&[u8], f64)> = ordered(members)
        .into_iter()
        .filter(|(_, score)| range.contains(*score))
        .collect();
    if reverse {
        sorted.reverse();
    }
    if let Some((offset, n)) = limit {
        let Ok(offset) = usize::try_from(offset) else {
            return Ok(Reply::Array(Vec::new()));
        };
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        sorted = sorted.into_iter().skip(offset).take(n).collect();
    }
    Ok(with_scores(&sorted, scores))
}

/// ZCOUNT: the members whose score is in the range.
pub(super) fn zcount(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let range = ScoreRange::parse(args[1], args[2])?;
    Ok(count(typed(store, args[0], as_zset)?.map_or(
        0,
        |members| {
            members
                .values()
                .filter(|score| range.contains(**score))
                .count()
        },
    )))
}

/// ZREMRANGEBYSCORE: removes the members whose score is in the range.
pub(super) fn zremrangebyscore(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let range = ScoreRange::parse(args[1], args[2])?;
    let key = args[0];
    let Some(members) = typed(store, key, as_zset)? else {
        return Ok(Reply::Int(0));
    };
    let before = members.len();
    members.retain(|_, score| !range.contains(*score));
    let removed = before - members.len();
    store.keys.drop_if_empty(key);
    Ok(count(removed))
}

/// ZREMRANGEBYRANK: removes `start..=stop` of the members in order.
pub(super) fn zremrangebyrank(store: &mut Store, args: &[&[u8]]) -> Outcome {
    let start = integer_arg(args[1])?;
    let stop = integer_arg(args[2])?;
    let key = args[0];
    let Some(members) = typed(store, key, as_zset)? else {
        return Ok(Reply::Int(0));
    };
    let doomed: Vec<Vec<u8>> = {
        let sorted = ordered(members);
        match super::lists::range(sorted.len(), start, stop) {
            None => Vec::new(),
            Some((from, to)) => sorted[from..=to]
                .iter()
                .map(|(member, _)| member.to_vec())
                .collect(),
        }
    };
    for member in &doomed {
        members.remove(member);
    }
    store.keys.drop_if_empty(key);
    Ok(count(doomed.len()))
}

pub(super) fn zrank(store: &mut Store, args: &[&[u8]]) -> Outcome {
    rank(store, args, false)
}

pub(super) fn zrevrank(store: &mut Store, args: &[&[u8]]) -> Outcome {
    rank(store, args, true)
}

/// ZRANK and ZREVRANK: the member's place in order (nil when absent).
fn rank(store: &mut Store, args: &[&[u8]], reverse: bool) -> Outcome {
    let Some(members) = typed(store, args[0], as_zset)? else {
        return Ok(Reply::Nil);
    };
    let sorted = ordered(members);
    Ok(sorted
        .iter()
        .position(|(member, _)| *member == args[1])
        .map_or(Reply::Nil, |at| {
            count(if reverse { sorted.len() - 1 - at } else { at })
        }))
}
