//! `redisync`: inspect, list, force-unlock, delete and watch redisync (and
//! Redisson) locks, semaphores and latches from a shell, and check a Redis
//! server's settings (`doctor`).
//!
//! Built only with the `cli` feature:
//! `cargo run --features cli --bin redisync -- inspect orders:42`, or
//! installed with `cargo install --path . --features cli`.
//!
//! Exit status (see [`EXIT_CODES`]): 0 done, 1 a finding or nothing
//! found, 2 a usage error, 3 a connection or server error, 4 a declined
//! confirmation. Errors are one line on stderr, with no password in it.
// A command-line tool writes its results to stdout by design.
#![allow(clippy::print_stdout)]

mod delete;
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
use redisync::Deployment;

/// How long a connection may take before a terminal hears about it.
const PROGRESS_AFTER: Duration = Duration::from_secs(1);

/// The URL used when neither `--url` nor `REDIS_URL` gives one.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

/// The exit statuses, as `--help` prints them.
const EXIT_CODES: &str = "\
Exit status:
  0  done (doctor: no danger found)
  1  a finding or nothing found: doctor found a danger or waiters on a
     semaphore nobody set; force-unlock found nothing held (a fair lock's
     queue is shown); delete found nothing under NAME, no such queued
     waiter, or data no redisync object stores
  2  usage error: bad arguments, a bad URL or option
  3  connection or server error: unreachable, timed out (--timeout),
     refused (password, ACL), or an unexpected reply
  4  confirmation declined (or not possible: no terminal and no --yes);
     nothing was changed";

/// Inspect and operate redisync / Redisson locks, semaphores and latches.
#[derive(Debug, Parser)]
#[command(name = "redisync", version, about, after_help = EXIT_CODES)]
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
    /// The longest wait for the server: to connect, and for each reply
    /// (`500ms`, `2s`, ...; a bare number is seconds). A server that does
    /// not answer in time is an error (exit status 3).
    #[arg(long, global = true, value_name = "DURATION", default_value = "5s",
          value_parser = parse_timeout)]
    timeout: Duration,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Show what lives under NAME: kind, holders, TTL, fencing token, fair
    /// queue, counter, leases; and, when nothing is stored, threads
    /// waiting on it as a semaphore whose permits were never set.
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
    /// Free whatever lock is held under NAME and wake its waiters (exit
    /// status 1 when nothing is held; a fair lock's queued waiters are
    /// shown then).
    ForceUnlock {
        /// The object's name.
        name: String,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Delete the object under NAME (any kind: its holders, a fair lock's
    /// queue and slot deadlines, leases, counter) and wake its waiters; or,
    /// with --waiter, remove only those queued fair-lock waiters (a dead
    /// process's entry blocks the queue until its slot runs out).
    Delete {
        /// The object's name.
        name: String,
        /// Remove only this queued fair-lock waiter (its id as `inspect`
        /// shows it; repeatable), keeping the lock and the other waiters.
        #[arg(long = "waiter", value_name = "ID")]
        waiters: Vec<String>,
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
    /// Ping the server, show its version, check its settings and look for
    /// threads waiting on semaphores whose permits were never set; exit
    /// status 1 when a finding endangers locks or such waiters exist.
    Doctor,
}

/// Exit status 1: a finding, or nothing found (see [`EXIT_CODES`]).
pub(crate) const EXIT_FINDING: u8 = 1;
/// Exit status 2: a usage error.
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit status 3: a connection or server error.
pub(crate) const EXIT_SERVER: u8 = 3;
/// Exit status 4: a declined confirmation.
pub(crate) const EXIT_DECLINED: u8 = 4;

/// A failure: one line for stderr, and the exit status it means.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The line.
    pub(crate) text: String,
    /// The exit status.
    pub(crate) code: u8,
}

impl Failure {
    /// A usage error (exit status 2).
    pub(crate) fn usage(text: impl Into<String>) -> Failure {
        Failure {
            text: text.into(),
            code: EXIT_USAGE,
        }
    }

    /// A connection or server error (exit status 3).
    pub(crate) fn server(text: impl Into<String>) -> Failure {
        Failure {
            text: text.into(),
            code: EXIT_SERVER,
        }
    }

    /// A declined confirmation (exit status 4).
    pub(crate) fn declined(text: impl Into<String>) -> Failure {
        Failure {
            text: text.into(),
            code: EXIT_DECLINED,
        }
    }

    /// Nothing to act on (exit status 1).
    pub(crate) fn finding(text: impl Into<String>) -> Failure {
        Failure {
            text: text.into(),
            code: EXIT_FINDING,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A library error: a rejected argument (a bad URL, a bad name) is a usage
/// error; everything else is the connection's or the server's.
impl From<redisync::Error> for Failure {
    fn from(error: redisync::Error) -> Self {
        let code = if error.is_invalid_argument() {
            EXIT_USAGE
        } else {
            EXIT_SERVER
        };
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
        Failure { text, code }
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
                return Err(Failure::usage(
                    "--cluster-node and --sentinel cannot be combined",
                ));
            }
            return cluster(&self.cluster_nodes);
        }
        if !self.sentinels.is_empty() {
            let Some(master) = &self.master else {
                return Err(Failure::usage("--sentinel needs --master NAME"));
            };
            return sentinel(master, &self.sentinels);
        }
        if self.master.is_some() {
            return Err(Failure::usage("--master needs at least one --sentinel URL"));
        }
        Ok(Deployment::single(self.url()))
    }

    /// A connected client. On a terminal, a connection that takes longer
    /// than [`PROGRESS_AFTER`] is said on stderr (where to, and for how
    /// long at most), so a frozen server is not a silent wait.
    pub(crate) fn client(&self) -> Result<Client, Failure> {
        let deployment = self.deployment()?;
        let (connected, waiting) = std::sync::mpsc::channel::<()>();
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            let note = format!(
                "redisync: connecting to {} (up to {:?}; --timeout changes it)...",
                redact(&self.place(), &self.all_urls()),
                self.timeout
            );
            std::thread::spawn(move || {
                if waiting.recv_timeout(PROGRESS_AFTER)
                    == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                {
                    eprintln!("{note}");
                }
            });
        }
        let client = Client::builder()
            .deployment(deployment)
            .name_prefix(self.name_prefix.clone())
            .connection_timeout(self.timeout)
            .response_timeout(self.timeout)
            .build();
        drop(connected);
        Ok(client?)
    }

    /// Where the options point, for a progress note: the URL, the cluster
    /// seeds or the sentinels.
    fn place(&self) -> String {
        if !self.cluster_nodes.is_empty() {
            self.cluster_nodes.join(", ")
        } else if !self.sentinels.is_empty() {
            self.sentinels.join(", ")
        } else {
            self.url()
        }
    }
}

#[cfg(feature = "cluster")]
fn cluster(nodes: &[String]) -> Result<Deployment, Failure> {
    Ok(Deployment::cluster(nodes))
}

#[cfg(not(feature = "cluster"))]
fn cluster(_nodes: &[String]) -> Result<Deployment, Failure> {
    Err(Failure::usage(
        "--cluster-node needs redisync built with the `cluster` feature",
    ))
}

#[cfg(feature = "sentinel")]
fn sentinel(master: &str, sentinels: &[String]) -> Result<Deployment, Failure> {
    Ok(Deployment::sentinel(master, sentinels))
}

#[cfg(not(feature = "sentinel"))]
fn sentinel(_master: &str, _sentinels: &[String]) -> Result<Deployment, Failure> {
    Err(Failure::usage(
        "--sentinel needs redisync built with the `sentinel` feature",
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

/// `--timeout`: a positive duration.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    let timeout = parse_duration(text)?;
    if timeout.is_zero() {
        return Err("must be positive".to_owned());
    }
    Ok(timeout)
}

/// Milliseconds as a JSON number rounded to the microsecond (`0.062`, not
/// `0.061711999999999996`).
pub(crate) fn ms_json(duration: Duration) -> serde_json::Value {
    let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    // Whole microseconds: serde_json writes the shortest text of the double.
    let ms = (nanos as f64 / 1000.0).round() / 1000.0;
    serde_json::json!(ms)
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

/// Asks on the terminal whether to `action` (a question without the `?`)
/// unless `yes`; without a terminal, refuses. Either refusal is exit
/// status 4, with nothing changed.
pub(crate) fn confirm(action: &str, yes: bool) -> Result<(), Failure> {
    use std::io::{BufRead, IsTerminal, Write};
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::declined(format!(
            "refusing to {action} without confirmation: stdin is not a terminal (pass --yes)"
        )));
    }
    let mut stderr = std::io::stderr();
    let _ = write!(stderr, "{action}? [y/N] ");
    let _ = stderr.flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::declined(format!("cannot read the answer: {e}")))?;
    match answer.trim() {
        "y" | "Y" | "yes" | "YES" | "Yes" => Ok(()),
        _ => Err(Failure::declined("not confirmed: nothing was changed")),
    }
}

/// `p:{name}` (or `p:name` when the name has its own hash tag), as Redisson
/// names channels and auxiliary keys.
pub(crate) fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
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
        Command::Delete { name, waiters, yes } => delete::run(&cli.target, name, waiters, *yes),
        Command::Watch { name, duration } => watch::run(&cli.target, name, *duration),
        Command::Doctor => doctor::run(&cli.target),
    };
    match outcome {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("redisync: error: {}", redact(&failure.text, &urls));
            ExitCode::from(failure.code)
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
    fn json_milliseconds_are_rounded() {
        assert_eq!(ms_json(Duration::from_nanos(61_711)).to_string(), "0.062");
        assert_eq!(ms_json(Duration::from_micros(1_500)).to_string(), "1.5");
        assert_eq!(ms_json(Duration::from_secs(2)).to_string(), "2000.0");
    }

    #[test]
    fn timeouts_are_positive() {
        assert_eq!(parse_timeout("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_timeout("0").is_err());
    }

    #[test]
    fn clock_times() {
        assert_eq!(clock_time(3_723_004), "01:02:03.004");
    }
}
