//! Slots: the hash slot of a key, as Redis Cluster computes it, and the
//! slot map a `CLUSTER SLOTS` reply gives (which master serves which
//! slots). Both `routing` and `discovery` read it from here, so neither
//! depends on the other for it.

use redis::Value;

/// The number of hash slots of a Redis Cluster.
pub(super) const SLOTS: u16 = 16_384;

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the text
/// between the first `{` and the next `}`, if not empty) or of the whole
/// key, modulo 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            key[open + 1..]
                .iter()
                .position(|&b| b == b'}')
                .filter(|&len| len > 0)
                .map(|len| &key[open + 1..open + 1 + len])
        })
        .unwrap_or(key);
    crc16(tagged) % SLOTS
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Slots `start..=end` served by the master at `node` (`host:port`).
#[derive(Debug, Clone)]
pub(super) struct SlotRange {
    pub(super) start: u16,
    pub(super) end: u16,
    pub(super) node: String,
}

/// Reads a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, ...],
/// replicas...], ...]`. An empty host means the node's own (the seed's).
pub(super) fn parse_slots(reply: &Value, seed_host: &str) -> Vec<SlotRange> {
    let mut ranges = Vec::new();
    let Value::Array(items) = reply else {
        return ranges;
    };
    for item in items {
        let Value::Array(fields) = item else { continue };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let Some((host, port)) = node_entry(master, seed_host) else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u16::try_from(*start), u16::try_from(*end)) else {
            continue;
        };
        let node = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        ranges.push(SlotRange { start, end, node });
    }
    ranges
}

/// The masters of a `CLUSTER SLOTS` reply: each range's first and last
/// slot and its master's host (an empty one is `seed_host`) and port.
pub(super) fn parse_slot_owners(reply: &Value, seed_host: &str) -> Vec<(u16, u16, (String, u16))> {
    let Value::Array(items) = reply else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let Value::Array(fields) = item else {
                return None;
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return None;
            };
            let node = node_entry(master, seed_host)?;
            Some((u16::try_from(*start).ok()?, u16::try_from(*end).ok()?, node))
        })
        .collect()
}

/// Every node (masters and replicas) a `CLUSTER SLOTS` reply names, once
/// each, as host and port.
pub(super) fn parse_nodes(reply: &Value, seed_host: &str) -> Vec<(String, u16)> {
    let mut nodes: Vec<(String, u16)> = Vec::new();
    let Value::Array(items) = reply else {
        return nodes;
    };
    for item in items {
        let Value::Array(fields) = item else { continue };
        for field in fields.iter().skip(2) {
            let Value::Array(entry) = field else { continue };
            if let Some(node) = node_entry(entry, seed_host)
                && !nodes.contains(&node)
            {
                nodes.push(node);
            }
        }
    }
    nodes
}

/// The host and port of one node entry of a `CLUSTER SLOTS` range
/// (`[host, port, id, ...]`); an empty or unknown host is the seed's.
fn node_entry(entry: &[Value], seed_host: &str) -> Option<(String, u16)> {
    let host = match entry.first()? {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        _ => return None,
    };
    let host = if host.is_empty() || host == "?" {
        seed_host.to_owned()
    } else {
        host
    };
    let Some(Value::Int(port)) = entry.get(1) else {
        return None;
    };
    Some((host, u16::try_from(*port).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn slot_map_reply_is_read() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                node("", 7001),
                node("10.0.0.2", 7004),
            ]),
        ]);
        let owners = parse_slot_owners(&reply, "127.0.0.1");
        assert_eq!(owners[1], (5461, 16383, ("127.0.0.1".to_owned(), 7001)));
        assert_eq!(owners[0].2, ("10.0.0.1".to_owned(), 7000));
        let ranges = parse_slots(&reply, "127.0.0.1");
        assert_eq!(ranges.len(), 2);
        assert_eq!(ranges[0].node, "10.0.0.1:7000");
        assert_eq!((ranges[1].start, ranges[1].end), (5461, 16383));
        assert_eq!(ranges[1].node, "127.0.0.1:7001");
    }

    #[test]
    fn slots_follow_the_cluster_spec() {
        // The examples of the Redis Cluster specification and redis-cli.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
        assert_eq!(slot(b"redisson_lock__channel:{orders}"), slot(b"orders"));
    }
}
