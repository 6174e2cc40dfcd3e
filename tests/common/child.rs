//! Child processes for the integration tests: the test binary re-executed
//! in a role, and the parts of the roles that several binaries share.
//!
//! A test binary that spawns children has a `#[test] fn
//! child_role_entrypoint()` that returns at once unless [`ROLE_ENV`] is set,
//! and otherwise runs the role it names (tests/processes.rs,
//! tests/fault_suite.rs). Every child is owned by a [`ChildProcess`] whose
//! `Drop` kills and reaps it, so a failing assertion never leaves one
//! behind, and every child also exits on its own when its stdin closes (the
//! parent died) or after [`CHILD_MAX_LIFETIME`].
#![allow(clippy::print_stdout)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redisync::Client;

use super::TestServer;

/// Selects what a re-executed child does; absent in a normal test run.
pub const ROLE_ENV: &str = "REDISYNC_CHILD_ROLE";

/// The Redis URL the child connects to.
pub const URL_ENV: &str = "REDISYNC_URL";

/// The lock name the child uses.
pub const LOCK_ENV: &str = "REDISYNC_LOCK";

/// The holder child's watchdog timeout, in milliseconds.
pub const WATCHDOG_MS_ENV: &str = "REDISYNC_WATCHDOG_MS";

/// The key prefix of the fenced-holder child's downstream store.
pub const STORE_ENV: &str = "REDISYNC_STORE";

/// Printed by a child once it is ready (followed by its holder id for the
/// holder role).
pub const READY: &str = "REDISYNC-CHILD-READY";

/// Sent by the parent to the fenced-holder child: write to the downstream
/// store with your token (the rest of the line is the value).
pub const WRITE: &str = "write";

/// The fenced-holder child's answer to [`WRITE`]: `accepted` or `refused`,
/// then `lost=<is_lost>`.
pub const WRITE_RESULT: &str = "REDISYNC-CHILD-WRITE-RESULT";

/// A child never outlives this, even if its parent forgets it.
pub const CHILD_MAX_LIFETIME: Duration = Duration::from_secs(120);

/// How long the parent waits for a child's ready line (includes connecting).
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child: {name} is not set"))
}

/// Prints one protocol line for the parent. A leading newline keeps it off
/// libtest's `test child_role_entrypoint ... ` line.
pub fn announce(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{line}").expect("child: stdout");
    out.flush().expect("child: flush stdout");
}

/// Lines from the parent on stdin; the channel disconnects at EOF (the
/// parent closed the pipe or died).
pub fn parent_lines() -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// A duration in milliseconds from the environment variable `name`.
pub fn env_ms(name: &str) -> Duration {
    let ms = env(name);
    Duration::from_millis(
        ms.parse()
            .unwrap_or_else(|_| panic!("child: {name}={ms:?} is not a number of ms")),
    )
}

/// A builder for the child's client, on `URL`.
pub fn child_builder() -> redisync::ClientBuilder {
    Client::builder().redis_url(env(URL_ENV))
}

/// The child's client on `URL` with the watchdog timeout `WATCHDOG_MS`.
pub fn child_client_with_watchdog() -> Client {
    child_builder()
        .watchdog_timeout(env_ms(WATCHDOG_MS_ENV))
        .build()
        .expect("child: connect")
}

/// Says it is ready, followed by `what` (its holder or permit id), then
/// blocks until the parent closes stdin (or dies), or the lifetime cap.
pub fn ready_until_parent_done(what: &str) {
    let from_parent = parent_lines();
    announce(&format!("{READY} {what}"));
    until_parent_done(&from_parent);
}

/// Blocks until the parent closes stdin (or dies), or the lifetime cap.
pub fn until_parent_done(from_parent: &Receiver<String>) {
    let deadline = Instant::now() + CHILD_MAX_LIFETIME;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if from_parent.recv_timeout(left).is_err() {
            break;
        }
    }
}

/// A fresh plain connection to `url` (a child's own, for the protected
/// resource).
pub fn raw_connection(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .expect("child: url")
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("child: raw connection")
}

/// A downstream store that protects itself with fencing tokens: it accepts
/// a write only with a token above every token it accepted before (the check
/// and the write are one script, so atomic). KEYS[1] the highest token
/// accepted, KEYS[2] the data; ARGV[1] the token, ARGV[2] the value. Returns
/// 1 when accepted, 0 when refused.
pub const FENCED_STORE_WRITE: &str = r"
local highest = tonumber(redis.call('get', KEYS[1]) or '0')
if tonumber(ARGV[1]) <= highest then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('set', KEYS[2], ARGV[2])
return 1
";

/// The downstream store's key of the highest token it accepted.
pub fn store_highest_key(store: &str) -> String {
    format!("{store}:highest")
}

/// The downstream store's data key.
pub fn store_data_key(store: &str) -> String {
    format!("{store}:data")
}

/// Writes `value` to the downstream store `store` stamped with `token`;
/// true when the store accepted it.
pub fn store_write(raw: &mut redis::Connection, store: &str, token: u64, value: &str) -> bool {
    let accepted: i64 = redis::Script::new(FENCED_STORE_WRITE)
        .key(store_highest_key(store))
        .key(store_data_key(store))
        .arg(token)
        .arg(value)
        .invoke(raw)
        .expect("downstream store write");
    accepted == 1
}

/// Takes the fenced lock with the watchdog (short timeout) and writes to the
/// downstream store `STORE` with its token; says so with the token and its
/// holder id, then holds the lock until killed (or stdin closes). On a
/// `write <value>` line it writes again with the same token and reports
/// whether the store accepted it and whether its guard knows it is lost.
pub fn child_fenced_holder() {
    let url = env(URL_ENV);
    let store = env(STORE_ENV);
    let client = child_client_with_watchdog();
    let mut raw = raw_connection(&url);
    let guard = client
        .fenced_lock(env(LOCK_ENV))
        .lock()
        .expect("child: fenced lock");
    let token = guard
        .token()
        .expect("child: a fenced guard without a token");
    let first = format!("first write of pid {}", std::process::id());
    assert!(
        store_write(&mut raw, &store, token, &first),
        "child: the store refused the holder's first write (token {token})"
    );
    let from_parent = parent_lines();
    announce(&format!("{READY} {token} {}", client.current_holder_id()));
    let deadline = Instant::now() + CHILD_MAX_LIFETIME;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = from_parent.recv_timeout(left) else {
            break;
        };
        if let Some(value) = line.trim().strip_prefix(WRITE) {
            let accepted = store_write(&mut raw, &store, token, value.trim());
            announce(&format!(
                "{WRITE_RESULT} {} lost={}",
                if accepted { "accepted" } else { "refused" },
                guard.is_lost()
            ));
        }
    }
    drop(guard);
}

/// Takes a lock that a dead or frozen child held with the watchdog timeout
/// `watchdog`: `try_lock_for` waiting up to `watchdog` plus 10 s must get
/// it. `whose` names the holder in the failure message.
pub fn take_once_freed<G>(
    whose: &str,
    watchdog: Duration,
    try_lock_for: impl FnOnce(Duration) -> redisync::Result<Option<G>>,
) -> G {
    let wait = watchdog + Duration::from_secs(10);
    try_lock_for(wait)
        .unwrap()
        .unwrap_or_else(|| panic!("{whose} lock not freed within {wait:?}"))
}

/// Spawns a `role` child on `server` for the lock (or semaphore) `name`,
/// with the `extra` settings, and waits for its ready line; returns it with
/// what follows the ready marker (its holder id, token, ...).
pub fn spawn_ready(
    role: &str,
    server: &TestServer,
    name: &str,
    extra: &[(&str, String)],
) -> (ChildProcess, String) {
    let mut envs = vec![(URL_ENV, server.url()), (LOCK_ENV, name.to_owned())];
    envs.extend_from_slice(extra);
    let child = ChildProcess::spawn(role, &envs);
    let ready = child.expect_line(READY, READY_TIMEOUT);
    (child, ready)
}

/// A duration as a child's `*_MS` setting.
pub fn ms(duration: Duration) -> String {
    duration.as_millis().to_string()
}

/// A child process (this binary re-executed in a role). Dropping it kills
/// (SIGKILL) and reaps it, so no test leaves a child behind.
pub struct ChildProcess {
    pub role: String,
    child: Child,
    pub stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Everything the child wrote, for failure messages.
    transcript: Arc<Mutex<String>>,
}

impl ChildProcess {
    pub fn spawn(role: &str, envs: &[(&str, String)]) -> ChildProcess {
        ChildProcess::spawn_under(&[], role, envs)
    }

    /// Like [`spawn`](Self::spawn), with the test binary run through the
    /// command `prefix` (e.g. `ip netns exec <namespace>`), when not empty.
    pub fn spawn_under(prefix: &[&str], role: &str, envs: &[(&str, String)]) -> ChildProcess {
        let exe = std::env::current_exe().expect("current_exe");
        let mut command = match prefix.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(exe);
                command
            }
            None => Command::new(exe),
        };
        command
            .args([
                "--exact",
                "child_role_entrypoint",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE_ENV, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in envs {
            command.env(key, value);
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn the {role} child: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("child stdout");
        let stderr = child.stderr.take().expect("child stderr");
        let transcript = Arc::new(Mutex::new(String::new()));
        let (tx, lines) = mpsc::channel();
        let log = Arc::clone(&transcript);
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                log.lock().unwrap().push_str(&format!("[stdout] {line}\n"));
                // The receiver may be gone (test over): keep draining.
                let _ = tx.send(line);
            }
        });
        let log = Arc::clone(&transcript);
        thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut text);
            log.lock().unwrap().push_str(&format!("[stderr] {text}\n"));
        });
        ChildProcess {
            role: role.to_owned(),
            child,
            stdin,
            lines,
            transcript,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn transcript(&self) -> String {
        self.transcript.lock().unwrap().clone()
    }

    /// Waits for a line containing `marker`; returns what follows it.
    pub fn expect_line(&self, marker: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(at) = line.find(marker) {
                        return line[at + marker.len()..].trim().to_owned();
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{} child (pid {}) printed no {marker:?} within {timeout:?}; output:\n{}",
                    self.role,
                    self.pid(),
                    self.transcript()
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    // Let the stderr reader finish before reporting.
                    thread::sleep(Duration::from_millis(200));
                    panic!(
                        "{} child (pid {}) exited before printing {marker:?}; output:\n{}",
                        self.role,
                        self.pid(),
                        self.transcript()
                    )
                }
            }
        }
    }

    /// Waits up to `timeout` for a line containing `marker`; returns what
    /// follows it, or `None` when none came in time (or the child exited):
    /// for a test that must say itself why the line not coming is wrong.
    pub fn line_within(&self, marker: &str, timeout: Duration) -> Option<String> {
        self.first_line_of(&[marker], timeout).map(|(_, rest)| rest)
    }

    /// Waits up to `timeout` for a line containing one of `markers`;
    /// returns which one (its index) and what follows it, or `None` when
    /// none came in time (or the child exited).
    pub fn first_line_of(&self, markers: &[&str], timeout: Duration) -> Option<(usize, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).ok()?;
            for (i, marker) in markers.iter().enumerate() {
                if let Some(at) = line.find(marker) {
                    return Some((i, line[at + marker.len()..].trim().to_owned()));
                }
            }
        }
    }

    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("child stdin");
        writeln!(stdin, "{line}").expect("write to child stdin");
        stdin.flush().expect("flush child stdin");
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL through the child's own handle, then reap it and check that
    /// the SIGKILL is what ended it.
    pub fn kill(&mut self) {
        self.child.kill().expect("kill the child");
        let status = self.child.wait().expect("reap the child");
        assert_eq!(
            status.signal(),
            Some(9),
            "child was not SIGKILLed: {status}"
        );
    }

    /// Waits (bounded) for the child to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the child") {
                return status;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} child (pid {}) still running after {timeout:?}; output:\n{}",
                    self.role,
                    self.pid(),
                    self.transcript()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns a fenced-holder child (watchdog `watchdog`) on `server` for the
/// lock `name` and the downstream store `store`; returns it with its token
/// and holder id once it holds the lock and has written once.
pub fn spawn_fenced_holder(
    server: &TestServer,
    name: &str,
    store: &str,
    watchdog: Duration,
) -> (ChildProcess, u64, String) {
    let (child, ready) = spawn_ready(
        "fenced_holder",
        server,
        name,
        &[
            (STORE_ENV, store.to_owned()),
            (WATCHDOG_MS_ENV, ms(watchdog)),
        ],
    );
    let mut words = ready.split_whitespace();
    let token: u64 = words
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("bad ready line {ready:?}"));
    let holder = words.next().expect("holder id").to_owned();
    (child, token, holder)
}

pub fn get(raw: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(raw).unwrap()
}
