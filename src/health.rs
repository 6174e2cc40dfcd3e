//! Health: [`Client::ping`](crate::Client::ping) and
//! [`Client::check_server`](crate::Client::check_server), which reads the
//! server's settings (`INFO`, `CONFIG GET`) through
//! [`LockBackend::server_command`] and says which of them put locks at
//! risk ([`ServerReport`]).

use std::fmt;
use std::time::Duration;

use crate::backend::{LockBackend, Reply, ServerReply};
use crate::{Error, Result};

/// The oldest Redis the library supports on a single server or Sentinel
/// (README: Redis 6.2+).
const MIN_VERSION: (u32, u32, u32) = (6, 2, 0);
/// The oldest on a cluster: sharded pub/sub (`SPUBLISH`, `SSUBSCRIBE`).
const MIN_CLUSTER_VERSION: (u32, u32, u32) = (7, 0, 0);

/// How much a [`Finding`] matters, least first.
///
/// ```
/// use redisync::Severity;
/// assert!(Severity::Danger > Severity::Warning && Severity::Warning > Severity::Info);
/// assert_eq!(Severity::Danger.to_string(), "danger");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Severity {
    /// Worth knowing (e.g. a setting that could not be read).
    Info,
    /// Weakens the guarantees in some failures.
    Warning,
    /// Locks or fencing tokens can be lost in ordinary operation.
    Danger,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Danger => "danger",
        })
    }
}

/// One thing [`Client::check_server`](crate::Client::check_server) found.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// for finding in client.check_server()?.findings() {
///     println!("{}: {} ({}) -> {}", finding.severity, finding.found, finding.why, finding.fix);
/// }
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// How much it matters.
    pub severity: Severity,
    /// The server it is about (`host:port`, `memory`).
    pub server: String,
    /// The setting or property, e.g. `maxmemory-policy`, `persistence`.
    pub setting: String,
    /// What was found.
    pub found: String,
    /// Why it matters for locks.
    pub why: String,
    /// What to change.
    pub fix: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} on {}\n  why: {}\n  fix: {}",
            self.severity, self.found, self.server, self.why, self.fix
        )
    }
}

/// What [`Client::check_server`](crate::Client::check_server) found: the
/// servers it asked and its [`Finding`]s, worst first. No finding means
/// nothing to report.
///
/// ```
/// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
/// let report = client.check_server()?;
/// assert_eq!(report.worst(), Some(redisync::Severity::Info));
/// println!("{report}");
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ServerReport {
    /// The servers asked, with their Redis version when known
    /// (`127.0.0.1:6379 (Redis 7.0.15)`).
    pub servers: Vec<String>,
    /// What was found, worst first.
    pub findings: Vec<Finding>,
}

impl ServerReport {
    /// The findings, worst first.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert_eq!(client.check_server()?.findings().len(), 1);
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }

    /// The most severe finding's severity; `None` when nothing was found.
    ///
    /// ```
    /// assert_eq!(redisync::ServerReport::default().worst(), None);
    /// ```
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|finding| finding.severity).max()
    }

    /// Whether no finding is a warning or a danger.
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert!(client.check_server()?.is_ok());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn is_ok(&self) -> bool {
        self.worst().is_none_or(|worst| worst < Severity::Warning)
    }

    /// The findings about `setting` (e.g. `"maxmemory-policy"`).
    ///
    /// ```
    /// # let client = redisync::Client::builder().backend(redisync::MemoryBackend::new()).build()?;
    /// assert!(client.check_server()?.about("maxmemory-policy").next().is_none());
    /// # Ok::<(), redisync::Error>(())
    /// ```
    pub fn about<'a>(&'a self, setting: &'a str) -> impl Iterator<Item = &'a Finding> + 'a {
        self.findings
            .iter()
            .filter(move |finding| finding.setting == setting)
    }
}

impl fmt::Display for ServerReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "checked: {}", self.servers.join(", "))?;
        if self.findings.is_empty() {
            return write!(f, "\nno findings");
        }
        for finding in &self.findings {
            write!(f, "\n{finding}")?;
        }
        Ok(())
    }
}

/// The slowest server's PING round trip.
pub(crate) fn ping(backend: &dyn LockBackend) -> Result<Duration> {
    let replies = backend.server_command(&["PING"])?;
    let mut slowest = None;
    for reply in &replies {
        if let Reply::Error(text) = &reply.reply {
            return Err(Error::backend(
                format!("PING on {}: the server answered {text}", reply.server),
                false,
            ));
        }
        slowest = slowest.max(Some(reply.round_trip));
    }
    slowest.ok_or_else(|| Error::backend("PING: the backend named no server to ask", false))
}

/// Reads every server's settings and reports what puts locks at risk.
pub(crate) fn check(backend: &dyn LockBackend) -> Result<ServerReport> {
    let cluster = backend.slot_of("redisync").is_some();
    let infos = backend.server_command(&["INFO"])?;
    let mut report = ServerReport::default();
    for reply in &infos {
        let server = &reply.server;
        let info = match &reply.reply {
            Reply::Error(text) => {
                report.servers.push(server.clone());
                report.findings.push(finding(
                    Severity::Info,
                    server,
                    "INFO",
                    format!("the store does not answer INFO ({text})"),
                    "no server settings could be checked (an in-process MemoryBackend has none: \
                     it keeps nothing past the process)",
                    "nothing, for a MemoryBackend; otherwise grant +info to the ACL user",
                ));
                continue;
            }
            other => Info::parse(other.as_text().unwrap_or_default()),
        };
        let version = info.get("redis_version");
        report.servers.push(match version {
            Some(version) => format!("{server} (Redis {version})"),
            None => server.clone(),
        });
        let config = |name: &str| config_get(backend, server, name);
        check_version(&mut report, server, version, cluster);
        check_eviction(&mut report, server, &info);
        check_persistence(&mut report, server, &info, &config("save"));
        check_min_replicas(&mut report, server, &info, &config("min-replicas-to-write"));
    }
    if !cluster {
        check_clock(backend, &mut report);
    }
    report
        .findings
        .sort_by_key(|finding| std::cmp::Reverse(finding.severity));
    Ok(report)
}

/// The server's clock, read with `TIME`, against two things: the estimate
/// the connections work with (a reading off it by more than the tolerance
/// means the server's clock stepped since they read it; the pool reads it
/// again within a few seconds, and reports the step to the event handler)
/// and this machine's wall clock (a large difference is a clock that was
/// stepped, or is not kept by NTP, on one side).
fn check_clock(backend: &dyn LockBackend, report: &mut ServerReport) {
    let estimate_before = backend.server_now_ms();
    let wall_before = crate::clock::wall_clock_ms();
    let Ok(replies) = backend.server_command(&["TIME"]) else {
        return;
    };
    let (estimate_after, wall_after) = (backend.server_now_ms(), crate::clock::wall_clock_ms());
    let Some(reply) = replies.first() else {
        return;
    };
    let Some(server_ms) = time_reply_ms(&reply.reply) else {
        return; // refused (an ACL without TIME) or an in-process store
    };
    let tolerance = crate::clock::STEP_TOLERANCE_MS;
    let server = &reply.server;
    if let (Some(before), Some(after)) = (estimate_before, estimate_after) {
        let step = off_by(server_ms, before, after, tolerance);
        if step != 0 {
            report.findings.push(finding(
                if step < 0 {
                    Severity::Danger
                } else {
                    Severity::Warning
                },
                server,
                "clock",
                format!(
                    "the server's clock is {} ms {} the time this client's connections expect \
                     (stepped since they read it)",
                    step.unsigned_abs(),
                    if step < 0 { "behind" } else { "ahead of" }
                ),
                "a clock stepped back lets a request sent before the step act up to that much \
                 later than its window; stepped forward, it expires leases and records early",
                "keep the server's clock slewed by NTP (chrony's makestep off after boot), never \
                 stepped; the connections read it again within seconds",
            ));
        }
    }
    let skew = off_by(server_ms, wall_before, wall_after, tolerance);
    if skew != 0 {
        report.findings.push(finding(
            Severity::Info,
            server,
            "clock",
            format!(
                "the server's clock is {} ms {} this machine's wall clock",
                skew.unsigned_abs(),
                if skew < 0 { "behind" } else { "ahead of" }
            ),
            "redisync measures windows on the server's clock, so a steady difference is harmless; \
             a difference that changes is a clock being stepped (see the clock finding above, if \
             any), and Redisson clients on this machine date fair-lock slots by their own clock",
            "keep both clocks synchronised by NTP",
        ));
    }
}

/// How far `reading` falls outside `[low, high]` widened by `tolerance`
/// (negative: below), 0 inside it.
fn off_by(reading: i64, low: i64, high: i64, tolerance: i64) -> i64 {
    if reading < low - tolerance {
        reading - low
    } else if reading > high + tolerance {
        reading - high
    } else {
        0
    }
}

/// `TIME`'s reply (`[seconds, microseconds]` as text) in ms.
fn time_reply_ms(reply: &Reply) -> Option<i64> {
    let items = reply.as_array()?;
    let seconds: i64 = items.first()?.as_text()?.parse().ok()?;
    let micros: i64 = items.get(1)?.as_text()?.parse().ok()?;
    Some(seconds.saturating_mul(1000).saturating_add(micros / 1000))
}

fn finding(
    severity: Severity,
    server: &str,
    setting: &str,
    found: impl Into<String>,
    why: &str,
    fix: &str,
) -> Finding {
    Finding {
        severity,
        server: server.to_owned(),
        setting: setting.to_owned(),
        found: found.into(),
        why: why.to_owned(),
        fix: fix.to_owned(),
    }
}

/// `INFO`'s `field:value` lines.
struct Info(Vec<(String, String)>);

impl Info {
    fn parse(text: &str) -> Info {
        Info(
            text.lines()
                .filter(|line| !line.starts_with('#'))
                .filter_map(|line| line.split_once(':'))
                .map(|(field, value)| (field.trim().to_owned(), value.trim().to_owned()))
                .collect(),
        )
    }

    fn get(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(name, _)| name == field)
            .map(|(_, value)| value.as_str())
    }

    fn number(&self, field: &str) -> Option<i64> {
        self.get(field)?.parse().ok()
    }
}

/// `CONFIG GET name` on `server`: `Ok(value)`, or `Err(why)` when it could
/// not be read (refused by the ACL, CONFIG renamed away, another server).
fn config_get(
    backend: &dyn LockBackend,
    server: &str,
    name: &str,
) -> std::result::Result<String, String> {
    let replies = backend
        .server_command(&["CONFIG", "GET", name])
        .map_err(|err| err.to_string())?;
    let reply = replies
        .iter()
        .find(|reply| reply.server == server)
        .map(|ServerReply { reply, .. }| reply)
        .ok_or_else(|| format!("{server} did not answer"))?;
    match reply {
        Reply::Error(text) => Err(text.clone()),
        Reply::Array(items) => items
            .get(1)
            .and_then(Reply::as_text)
            .map(str::to_owned)
            .ok_or_else(|| format!("no setting {name}")),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

fn unreadable(report: &mut ServerReport, server: &str, setting: &str, why: &str, matters: &str) {
    report.findings.push(finding(
        Severity::Info,
        server,
        setting,
        format!("could not read {setting} (CONFIG GET: {why})"),
        matters,
        "grant +config|get to the ACL user to check it, or check it by hand",
    ));
}

fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.split('.').map(|part| part.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

fn check_version(report: &mut ServerReport, server: &str, version: Option<&str>, cluster: bool) {
    let (minimum, why) = if cluster {
        (
            MIN_CLUSTER_VERSION,
            "on a cluster, waiters are woken through sharded pub/sub (SPUBLISH, SSUBSCRIBE), \
             which Redis 7.0 introduced: older masters refuse the scripts",
        )
    } else {
        (
            MIN_VERSION,
            "redisync supports Redis 6.2 and later (its scripts, ACL rules and tests \
             assume it)",
        )
    };
    let Some(text) = version else {
        report.findings.push(finding(
            Severity::Info,
            server,
            "redis_version",
            "INFO server names no redis_version",
            why,
            "check the server's version by hand",
        ));
        return;
    };
    match parse_version(text) {
        Some(found) if found >= minimum => {}
        _ => report.findings.push(finding(
            Severity::Danger,
            server,
            "redis_version",
            format!(
                "Redis {text}, older than {}.{}.{}",
                minimum.0, minimum.1, minimum.2
            ),
            why,
            "upgrade Redis",
        )),
    }
}

fn check_eviction(report: &mut ServerReport, server: &str, info: &Info) {
    let Some(policy) = info.get("maxmemory_policy") else {
        return;
    };
    let limit = match info.number("maxmemory") {
        Some(0) | None => "no maxmemory set yet",
        Some(_) => "maxmemory is set",
    };
    if policy.starts_with("allkeys-") {
        report.findings.push(finding(
            Severity::Danger,
            server,
            "maxmemory-policy",
            format!("maxmemory-policy {policy} ({limit})"),
            "at maxmemory Redis evicts any key, lock keys and fencing counters included: \
             a held lock vanishes and another client takes it",
            "set maxmemory-policy noeviction (writes then fail at the limit instead)",
        ));
    } else if policy.starts_with("volatile-") {
        report.findings.push(finding(
            Severity::Warning,
            server,
            "maxmemory-policy",
            format!("maxmemory-policy {policy} ({limit})"),
            "at maxmemory Redis evicts keys with a TTL, and every held lock has one (its lease)",
            "set maxmemory-policy noeviction",
        ));
    }
}

fn check_persistence(
    report: &mut ServerReport,
    server: &str,
    info: &Info,
    save: &std::result::Result<String, String>,
) {
    let aof = info.number("aof_enabled").unwrap_or(0) != 0;
    let replicas = info.number("connected_slaves").unwrap_or(0);
    if aof || replicas > 0 {
        return;
    }
    const WHY: &str = "with no RDB snapshots, no AOF and no replica, a restart of this server \
                       loses every lock (another client takes a held one) and every fencing \
                       counter";
    match save {
        Ok(save) if save.trim().is_empty() => report.findings.push(finding(
            Severity::Danger,
            server,
            "persistence",
            "no persistence (save \"\", appendonly no) and no replica",
            WHY,
            "enable appendonly yes (appendfsync everysec or always), or RDB snapshots, \
             and/or add a replica (with Sentinel or a cluster for failover)",
        )),
        Ok(_) => {}
        Err(why) => unreadable(report, server, "save", why, WHY),
    }
}

fn check_min_replicas(
    report: &mut ServerReport,
    server: &str,
    info: &Info,
    setting: &std::result::Result<String, String>,
) {
    let replicas = info.number("connected_slaves").unwrap_or(0);
    if replicas == 0 {
        return;
    }
    // INFO shows min_slaves_good_slaves only when the setting is on.
    let off = match setting {
        Ok(value) => value.trim() == "0",
        Err(_) => info.get("min_slaves_good_slaves").is_none(),
    };
    if off {
        report.findings.push(finding(
            Severity::Warning,
            server,
            "min-replicas-to-write",
            format!("{replicas} replica(s) connected, min-replicas-to-write 0"),
            "the master accepts lock writes that no replica has; a failover can lose a lock \
             just taken and hand it out again",
            "set min-replicas-to-write 1 (and min-replicas-max-lag), and/or use \
             ClientBuilder::replica_acknowledgement",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_is_off_only_beyond_the_tolerance() {
        assert_eq!(off_by(1_000, 900, 1_100, 50), 0);
        assert_eq!(off_by(840, 900, 1_100, 50), -60);
        assert_eq!(off_by(860, 900, 1_100, 50), 0);
        assert_eq!(off_by(1_200, 900, 1_100, 50), 100);
        // Stepped back 30 s against the estimate.
        assert_eq!(off_by(70_000, 100_000, 100_010, 1_000), -30_000);
    }

    #[test]
    fn a_time_reply_reads_as_milliseconds() {
        let reply = Reply::Array(vec![
            Reply::Bulk(b"1795870464".to_vec()),
            Reply::Bulk(b"123456".to_vec()),
        ]);
        assert_eq!(time_reply_ms(&reply), Some(1_795_870_464_123));
        assert_eq!(time_reply_ms(&Reply::Error("NOPERM".into())), None);
    }
}
