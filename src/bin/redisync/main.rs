//! `redisync`: inspect, list, force-unlock and watch redisync (and
//! Redisson) locks, semaphores and latches from a shell, and check a Redis
//! server's settings (`doctor`).
//!
//! Built only with the `cli` feature:
//! `cargo run --features cli --bin redisync -- inspect orders:42`.
//!
//! Exit status: 0 on success, 1 when `doctor` finds a setting that endangers
//! locks, 2 on any error (one line on stderr, with no password in it).
// A command-line tool writes its results to stdout by design.
#![allow(clippy::print_stdout)]

mod doctor;
mod force_unlock;
mod inspect;
mod list;
mod watch;

use std::fmt;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Parser, Subcommand};
use redisync::Client;
use redisync::backend::Deployment;

/// The URL used when neither `--url` nor `REDIS_URL` gives one.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

/// Inspect and operate redisync / Redisson locks, semaphores and latches.
#[derive(Debug, Parser)]
#[command(name = "redisync", version, about)]
struct Cli {
    /// Where the objects live.
    #[command(flatten)]
    target: Target,
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The global options: which deployment, and the output format.
#[derive(Debug, Args)]
struct Target {
    /// One server's URL, `redis://[user:password@]host:port/db` (default:
    /// `REDIS_URL`, else redis://127.0.0.1:6379/).
    #[arg(long, global = true, value_name = "URL")]
    url: Option<String>,
    /// A Redis Cluster seed node (repeatable; needs the `cluster` feature).
    #[arg(long = "cluster-node", global = true, value_name = "URL")]
    cluster_nodes: Vec<String>,
    /// A sentinel (repeatable, with `--master`; needs the `sentinel` feature).
    #[arg(long = "sentinel", global = true, value_name = "URL")]
    sentinels: Vec<String>,
    /// The Sentinel-monitored master's name.
    #[arg(long, global = true, value_name = "NAME")]
    master: Option<String>,
    /// One JSON document on stdout instead of a table (`watch`: one JSON
    /// object per line, per event).
    #[arg(long, global = true)]
    json: bool,
    /// The applications' name prefix (`ClientBuilder::name_prefix`,
    /// Redisson's prefixing `NameMapper`): NAMEs are given and shown
    /// without it, and `list` shows only the objects under it.
    #[arg(
        long = "name-prefix",
        global = true,
        value_name = "PREFIX",
        default_value = ""
    )]
    name_prefix: String,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Show what lives under NAME: kind, holders, TTL, fencing token, fair
    /// queue, counter, leases.
    Inspect {
        /// The object's name.
        name: String,
    },
    /// List every lock, semaphore and latch whose name matches PATTERN (a
    /// Redis glob; default `*`), found with SCAN.
    List {
        /// A glob: `*`, `?`, `[abc]`, `\` escapes.
        #[arg(default_value = "*")]
        pattern: String,
    },
    /// Free whatever lock is held under NAME and wake its waiters.
    ForceUnlock {
        /// The object's name.
        name: String,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Print each unlock, acquisition and queue change under NAME as it
    /// happens.
    Watch {
        /// The object's name.
        name: String,
        /// Stop after this long (`500ms`, `10s`, `5m`, `1h`; a bare number
        /// is seconds). Default: until interrupted.
        #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
        duration: Option<Duration>,
    },
    /// Ping the server, show its version and check its settings; exit
    /// status 1 when a finding endangers locks.
    Doctor,
}

/// A failure: one line for stderr.
#[derive(Debug)]
pub(crate) struct Failure(pub(crate) String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<redisync::Error> for Failure {
    fn from(error: redisync::Error) -> Self {
        let mut text = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            let cause = cause.to_string();
            if !text.contains(&cause) {
                text.push_str(": ");
                text.push_str(&cause);
            }
            source = cause_of(source);
        }
        Failure(text)
    }
}

/// The next cause in a chain.
fn cause_of<'a>(
    error: Option<&'a (dyn std::error::Error + 'static)>,
) -> Option<&'a (dyn std::error::Error + 'static)> {
    error.and_then(|error| error.source())
}

/// What a subcommand returns: how the process exits.
pub(crate) type Outcome = Result<ExitCode, Failure>;

impl Target {
    /// The single server's URL: `--url`, else `REDIS_URL`, else the default.
    fn url(&self) -> String {
        self.url
            .clone()
            .or_else(|| {
                std::env::var("REDIS_URL")
                    .ok()
                    .filter(|url| !url.is_empty())
            })
            .unwrap_or_else(|| DEFAULT_URL.to_owned())
    }

    /// Every URL given (for redaction).
    fn all_urls(&self) -> Vec<String> {
        let mut urls = vec![self.url()];
        urls.extend(self.cluster_nodes.iter().cloned());
        urls.extend(self.sentinels.iter().cloned());
        urls
    }

    /// The first cluster seed URL, when the options name a cluster.
    pub(crate) fn cluster_seed(&self) -> Option<String> {
        self.cluster_nodes.first().cloned()
    }

    /// The deployment the options name.
    fn deployment(&self) -> Result<Deployment, Failure> {
        if !self.cluster_nodes.is_empty() {
            if !self.sentinels.is_empty() {
                return Err(Failure(
                    "--cluster-node and --sentinel cannot be combined".into(),
                ));
            }
            return cluster(&self.cluster_nodes);
        }
        if !self.sentinels.is_empty() {
            let Some(master) = &self.master else {
                return Err(Failure("--sentinel needs --master NAME".into()));
            };
            return sentinel(master, &self.sentinels);
        }
        if self.master.is_some() {
            return Err(Failure("--master needs at least one --sentinel URL".into()));
        }
        Ok(Deployment::single(self.url()))
    }

    /// A connected client.
    pub(crate) fn client(&self) -> Result<Client, Failure> {
        Ok(Client::builder()
            .deployment(self.deployment()?)
            .name_prefix(self.name_prefix.clone())
            .build()?)
    }
}

#[cfg(feature = "cluster")]
fn cluster(nodes: &[String]) -> Result<Deployment, Failure> {
    Ok(Deployment::cluster(nodes))
}

#[cfg(not(feature = "cluster"))]
fn cluster(_nodes: &[String]) -> Result<Deployment, Failure> {
    Err(Failure(
        "--cluster-node needs redisync built with the `cluster` feature".into(),
    ))
}

#[cfg(feature = "sentinel")]
fn sentinel(master: &str, sentinels: &[String]) -> Result<Deployment, Failure> {
    Ok(Deployment::sentinel(master, sentinels))
}

#[cfg(not(feature = "sentinel"))]
fn sentinel(_master: &str, _sentinels: &[String]) -> Result<Deployment, Failure> {
    Err(Failure(
        "--sentinel needs redisync built with the `sentinel` feature".into(),
    ))
}

/// The password of `url`, if it has one (`scheme://[user]:password@host`).
fn password_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then_some(password)
}

/// `text` with every password of `urls` (raw and percent-decoded forms as
/// given) replaced by `***`, on one line.
fn redact(text: &str, urls: &[String]) -> String {
    let mut text = text.replace(['\n', '\r'], " ");
    for url in urls {
        if let Some(password) = password_of(url) {
            text = text.replace(password, "***");
        }
    }
    text
}

/// `humantime`-like durations: `250ms`, `10s`, `5m`, `1h`, or seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 500ms, 10s, 5m)"))?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "" | "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(format!("unknown unit {unit:?} (use ms, s, m or h)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        })
}

/// `HH:MM:SS.mmm` (UTC) of a time in ms since the epoch.
pub(crate) fn clock_time(ms: i64) -> String {
    let day_ms = ms.rem_euclid(86_400_000);
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day_ms / 3_600_000,
        day_ms / 60_000 % 60,
        day_ms / 1000 % 60,
        day_ms % 1000
    )
}

/// A TTL for a table: `29.9 s`, `-` for none.
pub(crate) fn ttl_text(ttl: Option<Duration>) -> String {
    ttl.map_or_else(|| "-".to_owned(), |ttl| format!("{} ms", ttl.as_millis()))
}

/// A TTL in ms for JSON.
pub(crate) fn ttl_ms(ttl: Option<Duration>) -> Option<u128> {
    ttl.map(|ttl| ttl.as_millis())
}

/// Prints a JSON document on stdout.
pub(crate) fn print_json(value: &serde_json::Value) {
    println!("{value}");
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let urls = cli.target.all_urls();
    let outcome = match &cli.command {
        Command::Inspect { name } => inspect::run(&cli.target, name),
        Command::List { pattern } => list::run(&cli.target, pattern),
        Command::ForceUnlock { name, yes } => force_unlock::run(&cli.target, name, *yes),
        Command::Watch { name, duration } => watch::run(&cli.target, name, *duration),
        Command::Doctor => doctor::run(&cli.target),
    };
    match outcome {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("redisync: error: {}", redact(&failure.0, &urls));
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_found_and_redacted() {
        assert_eq!(password_of("redis://:pw@h:1/"), Some("pw"));
        assert_eq!(password_of("redis://u:p%40w@h:1/0"), Some("p%40w"));
        assert_eq!(password_of("redis://h:1/"), None);
        assert_eq!(password_of("redis://user@h:1/"), None);
        let urls = vec!["redis://:s3cret@h:1/".to_owned()];
        assert_eq!(redact("bad s3cret\nx", &urls), "bad *** x");
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_duration("5 parsecs").is_err());
    }

    #[test]
    fn clock_times() {
        assert_eq!(clock_time(3_723_004), "01:02:03.004");
    }
}
