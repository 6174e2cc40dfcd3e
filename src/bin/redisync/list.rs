//! `redisync list [PATTERN]`: every lock, semaphore and latch whose name
//! matches, found with `SCAN` (never `KEYS`), one line each.
//!
//! Auxiliary keys are not objects of their own: `redisson_*` keys (unlock
//! latches, token counters, fair queues and deadlines) and `{name}:...`
//! keys (read holds, leases) are skipped, but a fair queue, a token counter
//! or leases name their object, so a free fair lock with waiters, a free
//! fenced lock and a semaphore with every permit leased are listed too.

use std::collections::BTreeSet;
use std::process::ExitCode;

use redisync::Reply;
use redisync::{Inspection, ObjectKind};
use serde_json::json;

use crate::inspect::{kind_id, to_json};
use crate::{Failure, Outcome, Target, print_json, ttl_text};

/// Keys asked for per `SCAN` round.
const SCAN_COUNT: &str = "1000";

/// Runs `list`.
pub(crate) fn run(target: &Target, pattern: &str) -> Outcome {
    let client = target.client()?;
    let mut names = BTreeSet::new();
    let keys = match target.cluster_seed() {
        Some(seed) => scan_cluster(&client, &seed)?,
        None => scan(&client)?,
    };
    for key in keys {
        // Only the objects under the name prefix, by their unprefixed names.
        if let Some(name) = object_name(&key)
            .and_then(|raw| raw.strip_prefix(client.name_prefix()).map(str::to_owned))
            && !name.is_empty()
            && glob(pattern.as_bytes(), name.as_bytes())
        {
            names.insert(name);
        }
    }
    let mut found = Vec::new();
    for name in names {
        let inspection = client.inspect(&name)?;
        match inspection.kind {
            ObjectKind::Absent | ObjectKind::Unknown { .. } => {}
            _ => found.push(inspection),
        }
    }
    if target.json {
        let objects: Vec<_> = found.iter().map(to_json).collect();
        print_json(&json!({ "pattern": pattern, "objects": objects }));
        return Ok(ExitCode::SUCCESS);
    }
    let width = found.iter().map(|f| f.name.len()).max().unwrap_or(4).max(4);
    println!(
        "{:<width$}  {:<26}  {:>7}  {:>7}  {:>10}  VALUE",
        "NAME", "KIND", "HOLDERS", "WAITERS", "TTL"
    );
    for object in &found {
        let value = value(object);
        let waiters = match (&object.kind, &object.election) {
            (ObjectKind::FairLock, _) => object.queue.len().to_string(),
            (ObjectKind::Election, Some(election)) => election.candidates.len().to_string(),
            _ => "-".to_owned(),
        };
        let line = format!(
            "{:<width$}  {:<26}  {:>7}  {:>7}  {:>10}  {value}",
            object.name,
            kind_id(&object.kind),
            holders(object),
            waiters,
            ttl_text(object.ttl)
        );
        println!("{}", line.trim_end());
    }
    Ok(ExitCode::SUCCESS)
}

/// The VALUE column, one wording per kind whatever the value: a counter
/// (a semaphore's permits or a latch's count: the data does not tell them
/// apart) is `counter N`, a permit-expirable semaphore's free permits
/// `permits N`, a fenced lock's last token `token N`, a barrier's
/// `generation G, A/P` (arrivals of parties).
fn value(object: &Inspection) -> String {
    match object.kind {
        ObjectKind::Counter => object
            .counter
            .map(|counter| format!("counter {counter}"))
            .unwrap_or_default(),
        ObjectKind::PermitExpirableSemaphore => object
            .available_permits()
            .map(|permits| format!("permits {permits}"))
            .unwrap_or_default(),
        ObjectKind::Election => object
            .election
            .as_ref()
            .and_then(|election| election.leader.as_ref())
            .map(|leader| format!("leader {}, term {}", leader.identity, leader.term))
            .unwrap_or_else(|| "no leader".to_owned()),
        ObjectKind::Barrier => object
            .barrier
            .map(|b| match b.parties {
                Some(parties) => format!("generation {}, {}/{parties}", b.generation, b.arrived),
                None => format!("generation {}", b.generation),
            })
            .unwrap_or_default(),
        _ => object
            .fencing_token
            .map(|token| format!("token {token}"))
            .unwrap_or_default(),
    }
}

/// The HOLDERS column: a lock's holders, a permit-expirable semaphore's
/// leased permits (each has a holder), `-` for a counter (it records none).
fn holders(object: &Inspection) -> String {
    match object.kind {
        ObjectKind::PermitExpirableSemaphore => object.leases.len().to_string(),
        ObjectKind::Counter | ObjectKind::Barrier => "-".to_owned(),
        ObjectKind::Election => object
            .election
            .as_ref()
            .map_or(0, |election| usize::from(election.leader.is_some()))
            .to_string(),
        _ => object.holders.len().to_string(),
    }
}

/// Every key of a cluster: the masters are those `server_command` reaches
/// (every master of the slot map); each is scanned on a connection of its
/// own, with the seed URL's scheme and credentials, since each has a
/// cursor of its own.
fn scan_cluster(client: &redisync::Client, seed: &str) -> Result<Vec<String>, Failure> {
    let mut keys = Vec::new();
    for master in client.backend().server_command(&["PING"])? {
        let url = with_address(seed, &master.server);
        let node = redis::Client::open(url.as_str())
            .map_err(|e| Failure::server(format!("master {}: {}", master.server, e)))?;
        let mut conn = node
            .get_connection_with_timeout(std::time::Duration::from_secs(10))
            .map_err(|e| Failure::server(format!("master {}: {}", master.server, e)))?;
        let mut cursor = 0u64;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query(&mut conn)
                .map_err(|e| Failure::server(format!("SCAN on master {}: {}", master.server, e)))?;
            keys.extend(batch);
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(keys)
}

/// `url` with its `host:port` replaced by `address` (scheme, credentials
/// and database kept).
fn with_address(url: &str, address: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
    let (credentials, host_and_path) = match rest.rsplit_once('@') {
        Some((credentials, tail)) => (format!("{credentials}@"), tail),
        None => (String::new(), rest),
    };
    let path = host_and_path
        .find('/')
        .map_or("", |slash| &host_and_path[slash..]);
    format!("{scheme}://{credentials}{address}{path}")
}

/// Every key, by `SCAN` on the server (one server or a Sentinel's master).
fn scan(client: &redisync::Client) -> Result<Vec<String>, Failure> {
    let mut keys = Vec::new();
    let mut cursor = "0".to_owned();
    loop {
        let replies = client
            .backend()
            .server_command(&["SCAN", &cursor, "COUNT", SCAN_COUNT])?;
        if replies.len() != 1 {
            return Err(Failure::server(format!(
                "SCAN: {} servers answered, expected one",
                replies.len()
            )));
        }
        let Some(reply) = replies.into_iter().next() else {
            return Err(Failure::server("SCAN: no reply"));
        };
        let Reply::Array(parts) = reply.reply else {
            return Err(Failure::server(format!(
                "SCAN: unexpected reply {:?}",
                reply.reply
            )));
        };
        let (Some(next), Some(Reply::Array(batch))) = (parts.first(), parts.get(1)) else {
            return Err(Failure::server("SCAN: unexpected reply shape"));
        };
        keys.extend(
            batch
                .iter()
                .filter_map(|key| key.as_text().map(str::to_owned)),
        );
        cursor = next
            .as_text()
            .map(str::to_owned)
            .or_else(|| next.as_int().map(|n| n.to_string()))
            .ok_or_else(|| Failure::server("SCAN: unexpected cursor"))?;
        if cursor == "0" {
            return Ok(keys);
        }
    }
}

/// The object name a key stands for: itself, the name inside a fair queue,
/// token counter or lease key, or `None` for another auxiliary key.
fn object_name(key: &str) -> Option<String> {
    for prefix in [
        "redisson_lock_queue:",
        "redisson_lock_timeout:",
        "redisson_lock_token:",
    ] {
        if let Some(rest) = key.strip_prefix(prefix) {
            return Some(election_name(rest).unwrap_or_else(|| unwrap_tag(rest)));
        }
    }
    // A leader election's keys (its lock's queue above): `{name}:redisync_*`.
    if let Some(name) = election_name(key) {
        return Some(name);
    }
    // `{name}:redisync_attempt:<id>`: an acquire attempt's record;
    // `{name}:redisync_op:<id>`: a counting call's record.
    if key.starts_with("redisson_")
        || key.contains(":redisync_attempt:")
        || key.contains(":redisync_op:")
        || key.contains(":rwlock_timeout")
    {
        return None;
    }
    if let Some(rest) = key.strip_suffix(":timeout") {
        // `{name}:timeout` (leases) or `{tag}...:timeout` (a tagged name's).
        return Some(unwrap_tag(rest));
    }
    Some(key.to_owned())
}

/// The election a key of it belongs to: `{name}:redisync_election` (its
/// lock), `_term`, `_leader`, `_terms`.
fn election_name(key: &str) -> Option<String> {
    [
        ":redisync_election",
        ":redisync_term",
        ":redisync_leader",
        ":redisync_terms",
    ]
    .iter()
    .find_map(|suffix| key.strip_suffix(suffix))
    .map(unwrap_tag)
}

/// `{name}` to `name`; a name with its own hash tag is kept as is.
fn unwrap_tag(text: &str) -> String {
    text.strip_prefix('{')
        .and_then(|inner| inner.strip_suffix('}'))
        .filter(|inner| !inner.contains(['{', '}']))
        .unwrap_or(text)
        .to_owned()
}

/// Redis-style glob matching: `*`, `?`, `[...]` (with `^` and ranges) and
/// `\` escapes.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some(b'*') => (0..=text.len()).any(|skip| glob(&pattern[1..], &text[skip..])),
        Some(b'?') => !text.is_empty() && glob(&pattern[1..], &text[1..]),
        Some(b'[') => {
            let Some(&c) = text.first() else {
                return false;
            };
            let mut i = 1;
            let negate = pattern.get(1) == Some(&b'^');
            if negate {
                i += 1;
            }
            let mut matched = false;
            while i < pattern.len() && pattern[i] != b']' {
                if pattern[i] == b'\\' && i + 1 < pattern.len() {
                    matched |= pattern[i + 1] == c;
                    i += 2;
                } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']'
                {
                    let (low, high) = (
                        pattern[i].min(pattern[i + 2]),
                        pattern[i].max(pattern[i + 2]),
                    );
                    matched |= (low..=high).contains(&c);
                    i += 3;
                } else {
                    matched |= pattern[i] == c;
                    i += 1;
                }
            }
            matched != negate && glob(pattern.get(i + 1..).unwrap_or(&[]), &text[1..])
        }
        Some(b'\\') if pattern.len() > 1 => {
            text.first() == Some(&pattern[1]) && glob(&pattern[2..], &text[1..])
        }
        Some(&p) => text.first() == Some(&p) && glob(&pattern[1..], &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_master_url_keeps_the_seeds_scheme_credentials_and_database() {
        assert_eq!(
            with_address("rediss://u:p@10.0.0.1:7000/0", "10.0.0.2:7001"),
            "rediss://u:p@10.0.0.2:7001/0"
        );
        assert_eq!(
            with_address("redis://10.0.0.1:7000", "10.0.0.2:7001"),
            "redis://10.0.0.2:7001"
        );
        assert_eq!(
            with_address("redis://:p@w@h:1/", "h2:2"),
            "redis://:p@w@h2:2/"
        );
    }

    #[test]
    fn globs_match_as_redis_does() {
        assert!(glob(b"*", b"anything"));
        assert!(glob(b"orders:*", b"orders:42"));
        assert!(!glob(b"orders:*", b"jobs:1"));
        assert!(glob(b"a?c", b"abc"));
        assert!(glob(b"[a-c]x", b"bx"));
        assert!(!glob(b"[^a-c]x", b"bx"));
        assert!(glob(b"\\*", b"*"));
        assert!(!glob(b"\\*", b"x"));
    }

    #[test]
    fn auxiliary_keys_name_their_object_or_are_skipped() {
        assert_eq!(object_name("orders:42").as_deref(), Some("orders:42"));
        assert_eq!(object_name("redisson_lock_queue:{f}").as_deref(), Some("f"));
        assert_eq!(object_name("redisson_lock_token:{t}").as_deref(), Some("t"));
        assert_eq!(object_name("redisson_unlock_latch:{a}:x"), None);
        assert_eq!(object_name("{a}:redisync_attempt:x"), None);
        assert_eq!(object_name("{a}:redisync_op:x"), None);
        assert_eq!(object_name("{rw}:c:1:rwlock_timeout:1"), None);
        assert_eq!(object_name("{s}:timeout").as_deref(), Some("s"));
        assert_eq!(object_name("{o}:42").as_deref(), Some("{o}:42"));
    }
}
