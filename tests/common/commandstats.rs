//! What a redis-server did between two moments, from `INFO commandstats`:
//! every command kind's call count, and which of them only clients send
//! (a Lua script never calls them), to tell the commands clients sent
//! from the ones scripts ran inside their `EVALSHA`.

use std::collections::BTreeMap;

/// Command kinds a script never calls with `redis.call` (Redis refuses
/// most of them inside scripts, and none of redisync's `lua/` calls the
/// others): each call of one of these is a command a client sent.
/// Everything else (`get`, `set`, `hincrby`, `pttl`, `publish`, `time`,
/// ...) may be a client's command or a script's, and is counted as a
/// script's unless the sender says otherwise.
pub const CLIENT_ONLY: &[&str] = &[
    "evalsha",
    "eval",
    "evalsha_ro",
    "eval_ro",
    "fcall",
    "fcall_ro",
    "script",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "ping",
    "client",
    "hello",
    "info",
    "select",
    "auth",
    "command",
    "config",
    "quit",
    "reset",
    "readonly",
    "readwrite",
    "wait",
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    "role",
    "sentinel",
    "cluster",
    "asking",
    "echo",
];

/// Calls per command kind (`get`, `client|setname`, ...), as `INFO
/// commandstats` reports them.
#[derive(Debug, Clone, Default)]
pub struct CommandStats(pub BTreeMap<String, u64>);

impl CommandStats {
    /// One `INFO commandstats` on `conn` (itself counted by the server
    /// after it answers: the next snapshot includes this `info` call).
    pub fn read(conn: &mut redis::Connection) -> CommandStats {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(conn)
            .expect("INFO commandstats");
        CommandStats::parse(&info)
    }

    /// Parses `cmdstat_<kind>:calls=<n>,usec=...` lines.
    pub fn parse(info: &str) -> CommandStats {
        let calls = info
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("cmdstat_")?;
                let (kind, fields) = rest.split_once(':')?;
                let calls = fields
                    .split(',')
                    .find_map(|f| f.strip_prefix("calls="))?
                    .trim()
                    .parse()
                    .ok()?;
                Some((kind.to_owned(), calls))
            })
            .collect();
        CommandStats(calls)
    }

    /// What happened since `before`, per kind (kinds with no new calls left out).
    pub fn since(&self, before: &CommandStats) -> CommandStats {
        CommandStats(
            self.0
                .iter()
                .filter_map(|(kind, calls)| {
                    let delta = calls.saturating_sub(before.calls(kind));
                    (delta > 0).then(|| (kind.clone(), delta))
                })
                .collect(),
        )
    }

    /// Calls of `kind` (`evalsha`, `client|setname`).
    pub fn calls(&self, kind: &str) -> u64 {
        self.0.get(kind).copied().unwrap_or(0)
    }

    /// Calls of every kind.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// Calls of the kinds only clients send ([`CLIENT_ONLY`]; a subcommand
    /// such as `client|setname` counts as its command).
    pub fn client_only(&self) -> u64 {
        self.0
            .iter()
            .filter(|(kind, _)| {
                let base = kind.split('|').next().unwrap_or(kind);
                CLIENT_ONLY.contains(&base)
            })
            .map(|(_, calls)| calls)
            .sum()
    }

    /// Scripts run (`EVALSHA` and `EVAL`, read-only forms included).
    pub fn scripts(&self) -> u64 {
        ["evalsha", "eval", "evalsha_ro", "eval_ro"]
            .iter()
            .map(|k| self.calls(k))
            .sum()
    }

    /// Takes `n` calls of `kind` off (the measurer's own `INFO`).
    pub fn minus(mut self, kind: &str, n: u64) -> CommandStats {
        if let Some(calls) = self.0.get_mut(kind) {
            *calls = calls.saturating_sub(n);
            if *calls == 0 {
                self.0.remove(kind);
            }
        }
        self
    }

    /// `kind=calls` pairs, most calls first, for the log.
    pub fn describe(&self) -> String {
        let mut kinds: Vec<(&String, &u64)> = self.0.iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        kinds
            .iter()
            .map(|(k, c)| format!("{k}={c}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A numeric field of an `INFO` section's text (`total_commands_processed`).
pub fn info_field(info: &str, field: &str) -> Option<u64> {
    info.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name == field).then(|| value.trim().parse().ok())?
    })
}

/// `INFO stats` and `INFO commandstats` read together (two `INFO` calls:
/// the next snapshot counts both).
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub commands: CommandStats,
    /// `INFO stats` fields that are numbers.
    pub stats: BTreeMap<String, u64>,
}

impl Snapshot {
    /// `INFO` calls one snapshot makes.
    pub const INFO_CALLS: u64 = 2;

    pub fn read(conn: &mut redis::Connection) -> Snapshot {
        Snapshot::read_sized(conn).0
    }

    /// Like [`read`](Self::read), with the size on the wire of its two
    /// replies (the server's output bytes that are the reader's own).
    pub fn read_sized(conn: &mut redis::Connection) -> (Snapshot, u64) {
        let stats_text: String = redis::cmd("INFO")
            .arg("stats")
            .query(conn)
            .expect("INFO stats");
        let commands_text: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(conn)
            .expect("INFO commandstats");
        let stats = stats_text
            .lines()
            .filter_map(|line| {
                let (name, value) = line.split_once(':')?;
                Some((name.to_owned(), value.trim().parse().ok()?))
            })
            .collect();
        let snapshot = Snapshot {
            commands: CommandStats::parse(&commands_text),
            stats,
        };
        (snapshot, bulk_size(&stats_text) + bulk_size(&commands_text))
    }

    /// How much `field` of `INFO stats` grew since `before`.
    pub fn stat_since(&self, before: &Snapshot, field: &str) -> u64 {
        let now = self.stats.get(field).copied().unwrap_or(0);
        now.saturating_sub(before.stats.get(field).copied().unwrap_or(0))
    }
}

/// The size on the wire of a bulk string reply holding `text`
/// (`$<len>\r\n<text>\r\n`).
pub fn bulk_size(text: &str) -> u64 {
    (text.len() + text.len().to_string().len() + 5) as u64
}
