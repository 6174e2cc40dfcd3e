//! The real Redisson beside redisync: a Java child process (the driver of
//! interop/java/) that runs Redisson's own primitives on command, for
//! tests/redisson.rs.
//!
//! The driver reads one command per line on stdin and answers one line per
//! command on stdout (see interop/java/src/main/java/redisync/interop/
//! Driver.java). Its Redisson clients are named (`client C single URL`), and
//! each command runs on an *actor* `C/T`: one Java thread of client `C`,
//! hence one Redisson lock holder. Replies carry the wall-clock microseconds
//! at which the operation started and ended, comparable with [`now_us`] in
//! this process (same machine, same clock), so a wake latency across the
//! two is `waiter's end - releaser's start`.
//!
//! The driver is built by `interop/java/build.sh` (Maven) when its jar is
//! missing or older than its sources. A missing `java` or `mvn` is a test
//! failure with a message saying what to install, never a skip.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a driver gets to start (the JVM on a loaded machine).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a command that should not block may take.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// Wall-clock microseconds since the epoch (the driver's time base).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Milliseconds from `from_us` to `to_us` (negative when `to` came first).
pub fn ms_between(from_us: u64, to_us: u64) -> f64 {
    (to_us as f64 - from_us as f64) / 1000.0
}

fn java_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop/java")
}

fn newest_source(dir: &std::path::Path) -> SystemTime {
    let mut newest = UNIX_EPOCH;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return newest;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let modified = if path.is_dir() {
            newest_source(&path)
        } else {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(UNIX_EPOCH)
        };
        newest = newest.max(modified);
    }
    newest
}

/// Builds the driver (once per test binary) unless its jar is newer than
/// its sources; returns the `java -cp` class path.
fn class_path() -> String {
    static BUILT: OnceLock<Result<String, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = java_dir();
            let jar = dir.join("target/redisson-driver.jar");
            let cp_file = dir.join("target/classpath.txt");
            let sources = newest_source(&dir.join("src")).max(
                std::fs::metadata(dir.join("pom.xml"))
                    .and_then(|m| m.modified())
                    .unwrap_or(UNIX_EPOCH),
            );
            let built = std::fs::metadata(&jar)
                .and_then(|m| m.modified())
                .ok()
                .filter(|_| cp_file.exists());
            if built.is_none_or(|at| at < sources) {
                let output = Command::new("bash")
                    .arg(dir.join("build.sh"))
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| format!("cannot run interop/java/build.sh: {e}"))?;
                if !output.status.success() {
                    return Err(format!(
                        "interop/java/build.sh failed ({}): the Redisson interop tests need a \
                         JDK 17+ and Maven (apt-get install -y default-jdk-headless maven) \
                         and Maven Central or a filled ~/.m2\n{}{}",
                        output.status,
                        String::from_utf8_lossy(&output.stdout),
                        String::from_utf8_lossy(&output.stderr)
                    ));
                }
            }
            let deps = std::fs::read_to_string(&cp_file)
                .map_err(|e| format!("cannot read {}: {e}", cp_file.display()))?;
            Ok(format!("{}:{}", jar.display(), deps.trim()))
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn java_binary() -> PathBuf {
    match std::env::var_os("JAVA_HOME") {
        Some(home) if PathBuf::from(&home).join("bin/java").exists() => {
            PathBuf::from(home).join("bin/java")
        }
        _ => PathBuf::from("java"),
    }
}

/// One reply of the driver.
#[derive(Debug, Clone)]
pub struct Reply {
    /// What the operation returned (`-` for nothing).
    pub value: String,
    /// When the operation started, [`now_us`] microseconds.
    pub start_us: u64,
    /// When it ended.
    pub end_us: u64,
}

impl Reply {
    /// The value as a Java boolean (`true`/`false`).
    pub fn bool(&self) -> bool {
        match self.value.as_str() {
            "true" => true,
            "false" => false,
            other => panic!("expected a boolean from Redisson, got {other:?}"),
        }
    }

    /// The value as a Java integer.
    pub fn int(&self) -> i64 {
        self.value
            .parse()
            .unwrap_or_else(|_| panic!("expected an integer from Redisson, got {:?}", self.value))
    }
}

struct Shared {
    /// Lines not yet taken, by who they answer (a client or an actor).
    pending: Mutex<(HashMap<String, VecDeque<String>>, bool)>,
    arrived: Condvar,
    transcript: Mutex<String>,
}

/// A running driver process. Dropping it kills the JVM (by its handle).
pub struct Redisson {
    child: Mutex<Child>,
    stdin: Mutex<Option<ChildStdin>>,
    shared: Arc<Shared>,
    /// `redisson=<version> java=<version>`, from the driver's first line.
    pub version: String,
}

static CLIENTS: AtomicU64 = AtomicU64::new(0);

impl Redisson {
    /// Builds the driver if needed and starts a JVM running it.
    pub fn spawn() -> Arc<Redisson> {
        let class_path = class_path();
        let java = java_binary();
        let mut child = Command::new(&java)
            .args([
                "-Xss512k",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-cp",
            ])
            .arg(&class_path)
            .arg("redisync.interop.Driver")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} (the Redisson interop tests need a JDK 17+: \
                     apt-get install -y default-jdk-headless): {e}",
                    java.display()
                )
            });
        let stdout = child.stdout.take().expect("driver stdout");
        let stderr = child.stderr.take().expect("driver stderr");
        let stdin = child.stdin.take();
        let shared = Arc::new(Shared {
            pending: Mutex::new((HashMap::new(), false)),
            arrived: Condvar::new(),
            transcript: Mutex::new(String::new()),
        });
        let reader = Arc::clone(&shared);
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                reader
                    .transcript
                    .lock()
                    .unwrap()
                    .push_str(&format!("{line}\n"));
                let who = line.split(' ').next().unwrap_or("").to_owned();
                let mut pending = reader.pending.lock().unwrap();
                pending.0.entry(who).or_default().push_back(line);
                reader.arrived.notify_all();
            }
            reader.pending.lock().unwrap().1 = true;
            reader.arrived.notify_all();
        });
        let log = Arc::clone(&shared);
        thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut text);
            log.transcript
                .lock()
                .unwrap()
                .push_str(&format!("[stderr] {text}\n"));
        });
        let mut driver = Redisson {
            child: Mutex::new(child),
            stdin: Mutex::new(stdin),
            shared,
            version: String::new(),
        };
        let ready = driver.take_line("ready", START_TIMEOUT);
        driver.version = ready.trim_start_matches("ready ").to_owned();
        eprintln!("Redisson driver started: {}", driver.version);
        Arc::new(driver)
    }

    /// The driver shared by the tests of this binary (one JVM start).
    pub fn shared() -> Arc<Redisson> {
        static SHARED: OnceLock<Arc<Redisson>> = OnceLock::new();
        Arc::clone(SHARED.get_or_init(Redisson::spawn))
    }

    /// The JVM's process id.
    pub fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    /// Everything the driver printed, for failure messages.
    pub fn transcript(&self) -> String {
        self.shared.transcript.lock().unwrap().clone()
    }

    fn send(&self, line: &str) {
        let mut stdin = self.stdin.lock().unwrap();
        let pipe = stdin.as_mut().expect("the driver's stdin is open");
        writeln!(pipe, "{line}")
            .and_then(|()| pipe.flush())
            .unwrap_or_else(|e| panic!("the Redisson driver is gone ({e}): {}", self.transcript()));
    }

    /// The next line for `who`, or `None` after `timeout`.
    fn try_take_line(&self, who: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let mut pending = self.shared.pending.lock().unwrap();
        loop {
            if let Some(line) = pending.0.get_mut(who).and_then(VecDeque::pop_front) {
                return Some(line);
            }
            let now = Instant::now();
            if now >= deadline || pending.1 {
                return None;
            }
            pending = self
                .shared
                .arrived
                .wait_timeout(pending, deadline - now)
                .unwrap()
                .0;
        }
    }

    fn take_line(&self, who: &str, timeout: Duration) -> String {
        self.try_take_line(who, timeout).unwrap_or_else(|| {
            panic!(
                "no reply for {who} from the Redisson driver within {timeout:?}; it printed:\n{}",
                self.transcript()
            )
        })
    }

    /// A Redisson client on a single server (`url` = `redis://host:port`),
    /// with Redisson's defaults unless `options` says otherwise
    /// (`prefix=P` sets a prefixing `NameMapper`, `watchdog_ms=N` the
    /// lock watchdog timeout).
    pub fn single(self: &Arc<Self>, url: &str, options: &[&str]) -> JavaClient {
        self.connect("single", url.trim_end_matches('/'), options)
    }

    /// A Redisson client in cluster mode, seeded with `urls` (sharded
    /// pub/sub: `ShardedSubscriptionMode.AUTO`, Redisson's default).
    pub fn cluster(self: &Arc<Self>, urls: &[String], options: &[&str]) -> JavaClient {
        self.connect("cluster", &urls.join(","), options)
    }

    fn connect(self: &Arc<Self>, mode: &str, urls: &str, options: &[&str]) -> JavaClient {
        let name = format!("j{}", CLIENTS.fetch_add(1, Ordering::Relaxed));
        self.send(&format!(
            "client {name} {mode} {urls} {}",
            options.join(" ")
        ));
        let line = self.take_line(&name, START_TIMEOUT);
        let id = line
            .strip_prefix(&format!("{name} ok "))
            .unwrap_or_else(|| panic!("Redisson could not connect to {urls}: {line}"))
            .to_owned();
        JavaClient {
            driver: Arc::clone(self),
            name,
            id,
        }
    }

    /// Kills the JVM at once (SIGKILL: no unlock, no shutdown hook), by
    /// its own handle, and reaps it.
    pub fn kill(&self) {
        let mut child = self.child.lock().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Redisson {
    fn drop(&mut self) {
        self.stdin.lock().unwrap().take();
        self.kill();
    }
}

/// One Redisson client inside a driver.
pub struct JavaClient {
    driver: Arc<Redisson>,
    name: String,
    /// The client's id (its holders are `<id>:<thread id>`).
    pub id: String,
}

impl JavaClient {
    /// Actor `label` of this client: one Java thread, one holder.
    pub fn actor(&self, label: &str) -> Actor {
        Actor {
            driver: Arc::clone(&self.driver),
            who: format!("{}/{label}", self.name),
        }
    }
}

impl Drop for JavaClient {
    fn drop(&mut self) {
        // Shut it down so a shared driver does not pile up clients; the
        // reply is not waited for (the test may be failing already).
        let mut stdin = self.driver.stdin.lock().unwrap();
        if let Some(pipe) = stdin.as_mut() {
            let _ = writeln!(pipe, "close {}", self.name).and_then(|()| pipe.flush());
        }
    }
}

/// One Java thread of a [`JavaClient`]: its commands run in order.
#[derive(Clone)]
pub struct Actor {
    driver: Arc<Redisson>,
    who: String,
}

impl Actor {
    /// Sends `command` (e.g. `lock lock orders`) without waiting.
    pub fn send(&self, command: &str) {
        self.driver.send(&format!("{} {command}", self.who));
    }

    /// The reply to the oldest command not yet answered: `Ok` or the
    /// Java exception's `Err(text)`; `None` if none came within `timeout`.
    pub fn try_reply(&self, timeout: Duration) -> Option<Result<Reply, String>> {
        let line = self.driver.try_take_line(&self.who, timeout)?;
        let rest = &line[self.who.len() + 1..];
        if let Some(err) = rest.strip_prefix("err ") {
            return Some(Err(err.to_owned()));
        }
        let fields: Vec<&str> = rest.split(' ').collect();
        match fields.as_slice() {
            ["ok", value, start, end] => Some(Ok(Reply {
                value: (*value).to_owned(),
                start_us: start.parse().expect("start µs"),
                end_us: end.parse().expect("end µs"),
            })),
            _ => panic!("unexpected line from the Redisson driver: {line}"),
        }
    }

    /// The successful reply to the oldest command, within `timeout`.
    pub fn reply_within(&self, timeout: Duration) -> Reply {
        match self.try_reply(timeout) {
            Some(Ok(reply)) => reply,
            Some(Err(err)) => panic!("{}: Redisson threw {err}", self.who),
            None => panic!(
                "{}: no reply from Redisson within {timeout:?}; the driver printed:\n{}",
                self.who,
                self.driver.transcript()
            ),
        }
    }

    /// The successful reply to the oldest command.
    pub fn reply(&self) -> Reply {
        self.reply_within(REPLY_TIMEOUT)
    }

    /// Runs `command` and returns its successful reply.
    pub fn call(&self, command: &str) -> Reply {
        self.send(command);
        self.reply()
    }

    /// Runs `command`, which must make Redisson throw; returns the text.
    pub fn call_err(&self, command: &str) -> String {
        self.send(command);
        match self.try_reply(REPLY_TIMEOUT) {
            Some(Err(err)) => err,
            Some(Ok(reply)) => panic!(
                "{}: `{command}` should have thrown, got {reply:?}",
                self.who
            ),
            None => panic!("{}: no reply to `{command}`", self.who),
        }
    }

    /// Asserts that the oldest command is still running (no reply within
    /// `for_at_least`).
    pub fn assert_waiting(&self, for_at_least: Duration, what: &str) {
        if let Some(reply) = self.try_reply(for_at_least) {
            panic!(
                "{}: {what} should still wait, but it answered {reply:?}",
                self.who
            );
        }
    }
}
