//! Integration-test harness: spawns a private `redis-server` on a free
//! loopback port and tears it down on drop.
//!
//! Included by every integration test binary (`mod common;`) and by the
//! benches (`#[path = "../tests/common/mod.rs"] mod common;`). Each binary
//! uses a different subset, hence the blanket `dead_code` allowance. This is
//! test code: failures panic with a descriptive message instead of returning
//! errors.
//!
//! The crate forbids `unsafe_code` for every target (tests included), so this
//! module deliberately avoids raw `libc` calls: the effective UID is read from
//! `/proc/self/status`, and `SIGSTOP`/`SIGCONT` are sent through the shell's
//! `kill` builtin.

#![allow(dead_code)]
#![allow(unreachable_pub)]
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub mod child;
#[cfg(feature = "cluster")]
pub mod cluster;
#[cfg(feature = "cluster")]
pub mod cluster_cases;
pub mod commandstats;
pub mod delay_proxy;
pub mod election_history;
pub mod history;
pub mod keys;
pub mod late;
pub mod netns;
pub mod outside;
pub mod primitive_history;
pub mod process;
pub mod redisson;
pub mod timing;
#[cfg(feature = "tls")]
pub mod tls;
pub mod wrap;

use redisync::{LockBackend, Message, PubSubConnection, Reply, ScriptCall};

/// Environment variable that overrides the `redis-server` binary to use.
pub const SERVER_BIN_ENV: &str = "REDISYNC_SERVER_BIN";

const INSTALL_HINT: &str = "install it with `apt-get install -y redis-server redis-tools` \
     (or your platform's equivalent), or set REDISYNC_SERVER_BIN=/path/to/redis-server";

/// Attempts (each on a fresh port) before `start` gives up.
const START_ATTEMPTS: usize = 5;
/// Attempts (same port) before `restart` gives up.
const RESTART_ATTEMPTS: usize = 20;
/// How long a freshly spawned server gets to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const READY_POLL: Duration = Duration::from_millis(10);

const LOG_FILE: &str = "redis.log";
/// Captured stdout/stderr of the server (startup config errors land here).
const STDIO_FILE: &str = "redis.stdio";

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn next_counter() -> u64 {
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// The bytes a permit id's hex digits spell: how Redisson (and redisync)
/// store a permit-expirable semaphore's id in its leases zset.
#[allow(dead_code)]
pub fn permit_id_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("a hex permit id"))
        .collect()
}

/// A unique name such as `prefix:<pid>:<counter>:<nanos>`, for lock names
/// that must not collide across tests, test binaries or runs.
pub fn unique_name(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}:{}:{}:{nanos}", std::process::id(), next_counter())
}

/// A `redis-server` child process owned by the current test.
///
/// The server listens on `127.0.0.1` only, with persistence disabled and its
/// working directory in a private temp dir. Dropping the value kills the
/// child (by its own handle, never by name) and removes the temp dir.
#[derive(Debug)]
pub struct TestServer {
    bin: PathBuf,
    port: u16,
    dir: PathBuf,
    extra_args: Vec<String>,
    /// Set in the server's environment (see `start_with_env`).
    envs: Vec<(String, String)>,
    /// `None` after `stop`. Behind a mutex so `is_running` can take `&self`.
    child: Mutex<Option<Child>>,
    pid: u32,
}

impl TestServer {
    /// Starts a server with the default configuration. Panics on failure.
    pub fn start() -> TestServer {
        Self::start_with(&[])
    }

    /// Starts a server with extra command-line arguments appended after the
    /// defaults (so they override them), e.g.
    /// `&["--maxmemory", "10mb"]`. Panics on failure.
    pub fn start_with(extra_args: &[&str]) -> TestServer {
        Self::start_with_env(extra_args, &[])
    }

    /// [`start_with`](Self::start_with), with `envs` set in the server's
    /// environment (e.g. `LD_PRELOAD` of libfaketime, to step its clock).
    pub fn start_with_env(extra_args: &[&str], envs: &[(&str, &str)]) -> TestServer {
        let bin = server_binary();
        let envs: Vec<(String, String)> = envs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let extra_args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        let mut last_failure = String::new();
        for attempt in 1..=START_ATTEMPTS {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!(
                "redisync-test-{}-{}-{port}",
                std::process::id(),
                next_counter()
            ));
            if let Err(e) = std::fs::create_dir_all(&dir) {
                panic!("TestServer: cannot create temp dir {}: {e}", dir.display());
            }
            match spawn_and_wait(&bin, port, &dir, &extra_args, &envs) {
                Ok(child) => {
                    let pid = child.id();
                    return TestServer {
                        bin,
                        port,
                        dir,
                        extra_args,
                        envs,
                        child: Mutex::new(Some(child)),
                        pid,
                    };
                }
                Err(failure) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    if !failure.port_conflict {
                        panic!(
                            "TestServer: {} failed to start on port {port}: {}",
                            bin.display(),
                            failure.message
                        );
                    }
                    eprintln!(
                        "TestServer: port {port} unavailable (attempt {attempt}/{START_ATTEMPTS}), \
                         retrying on another port"
                    );
                    last_failure = failure.message;
                }
            }
        }
        panic!(
            "TestServer: {} failed to start after {START_ATTEMPTS} attempts: {last_failure}",
            bin.display()
        );
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The TCP port the server listens on (unchanged by `restart`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// PID of the current server process (changes on `restart`; after `stop`
    /// it is the PID of the process that was stopped).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's private working directory (holds `redis.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A `redis::Client` for this server.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url())
            .unwrap_or_else(|e| panic!("TestServer: bad url {}: {e}", self.url()))
    }

    /// A fresh plain connection, for inspecting keys, `CLIENT KILL`,
    /// `SCRIPT FLUSH`, and so on.
    pub fn connection(&self) -> redis::Connection {
        self.client()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("TestServer: cannot connect to {}: {e}", self.url()))
    }

    /// Whether the server process is alive (a paused server counts as
    /// running).
    pub fn is_running(&self) -> bool {
        match self.lock_child().as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills the server (SIGKILL to its own PID) and reaps it. All data is
    /// lost. No-op if already stopped.
    pub fn stop(&mut self) {
        if let Some(child) = self.lock_child().take() {
            kill_and_reap(child);
        }
    }

    /// Stops the server, then starts a new one on the same port with the same
    /// directory and arguments, and waits until it answers `PING`. The new
    /// server starts empty. Panics if the port cannot be reclaimed.
    pub fn restart(&mut self) {
        self.stop();
        let mut last_failure = String::new();
        for _ in 0..RESTART_ATTEMPTS {
            match spawn_and_wait(
                &self.bin,
                self.port,
                &self.dir,
                &self.extra_args,
                &self.envs,
            ) {
                Ok(child) => {
                    self.pid = child.id();
                    *self.lock_child() = Some(child);
                    return;
                }
                Err(failure) if failure.port_conflict => {
                    last_failure = failure.message;
                    thread::sleep(Duration::from_millis(100));
                }
                Err(failure) => panic!(
                    "TestServer: restart on port {} failed: {}",
                    self.port, failure.message
                ),
            }
        }
        panic!(
            "TestServer: restart could not rebind port {} after {RESTART_ATTEMPTS} attempts: \
             {last_failure}",
            self.port
        );
    }

    /// Freezes the server process with SIGSTOP: connections stay open but
    /// nothing is answered until `resume`.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Resumes a server frozen by `pause` (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// Contents of the server's log file (empty if absent).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join(LOG_FILE)).unwrap_or_default()
    }

    fn signal(&self, sig: &str) {
        assert!(
            self.is_running(),
            "TestServer: cannot send SIG{sig}, server is not running"
        );
        send_signal(self.pid, sig);
    }

    fn lock_child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let child = self
            .child
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(child) = child {
            kill_and_reap(child);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends `SIG<sig>` (`"STOP"`, `"CONT"`, ...) to the process `pid`, by its
/// PID, never by name. The shell's `kill` builtin avoids both `unsafe` libc
/// calls and a dependency on procps' `kill` binary. Panics if it fails.
pub fn send_signal(pid: u32, sig: &str) {
    let status = Command::new("sh")
        .args(["-c", "kill -s \"$1\" \"$2\"", "sh", sig, &pid.to_string()])
        .stdin(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run sh for SIG{sig}: {e}"));
    assert!(status.success(), "kill -s {sig} {pid} failed: {status}");
}

fn kill_and_reap(mut child: Child) {
    // SIGKILL also works on a SIGSTOPped process.
    let _ = child.kill();
    let _ = child.wait();
}

/// Why a spawn attempt failed.
struct SpawnFailure {
    /// The server could not bind its port: worth retrying.
    port_conflict: bool,
    message: String,
}

/// Spawns `redis-server` and waits until it answers `PING` as itself.
fn spawn_and_wait(
    bin: &Path,
    port: u16,
    dir: &Path,
    extra_args: &[String],
    envs: &[(String, String)],
) -> Result<Child, SpawnFailure> {
    let log_path = dir.join(LOG_FILE);
    // Only the part of the log written by this attempt is relevant (restart
    // reuses the directory and redis appends).
    let log_offset = std::fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0);
    // Config errors are reported on stderr before the log file is opened, so
    // keep the child's stdio in a file next to the log (never the terminal).
    let stdio_path = dir.join(STDIO_FILE);
    let stdio_offset = std::fs::metadata(&stdio_path).map(|m| m.len()).unwrap_or(0);
    let stdio = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&stdio_path)
        .unwrap_or_else(|e| panic!("TestServer: cannot create {}: {e}", stdio_path.display()));
    let port_s = port.to_string();
    let mut child = Command::new(bin)
        .arg("--port")
        .arg(&port_s)
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .args(["--daemonize", "no"])
        .args(["--loglevel", "warning"])
        .arg("--logfile")
        .arg(&log_path)
        .args(extra_args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(
            stdio
                .try_clone()
                .map_or_else(|_| Stdio::null(), Stdio::from),
        )
        .stderr(Stdio::from(stdio))
        .spawn()
        .unwrap_or_else(|e| panic!("TestServer: cannot spawn {}: {e}", bin.display()));
    let pid = child.id();
    let url = format!("redis://127.0.0.1:{port}/");
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return Err(exited(status, dir, log_offset, stdio_offset));
            }
            Ok(None) => {}
            Err(e) => {
                kill_and_reap(child);
                panic!("TestServer: cannot poll redis-server (pid {pid}): {e}");
            }
        }
        let last_error = match probe(&url) {
            Ok(server_pid) if server_pid == pid => return Ok(child),
            // Some other server answered on "our" port: ours will fail to bind
            // and exit, which the next try_wait reports.
            Ok(other) => format!("port answered by another server (pid {other})"),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            kill_and_reap(child);
            panic!(
                "TestServer: redis-server (pid {pid}) on port {port} not ready after {:?} \
                 (last error: {last_error}); log:\n{}",
                READY_TIMEOUT,
                diagnostics(dir, 0, 0)
            );
        }
        thread::sleep(READY_POLL);
    }
}

/// PINGs the server and returns its `process_id`.
fn probe(url: &str) -> redis::RedisResult<u32> {
    let mut con =
        redis::Client::open(url)?.get_connection_with_timeout(Duration::from_millis(500))?;
    con.set_read_timeout(Some(Duration::from_secs(1)))?;
    con.set_write_timeout(Some(Duration::from_secs(1)))?;
    redis::cmd("PING").query::<String>(&mut con)?;
    let info: String = redis::cmd("INFO").arg("server").query(&mut con)?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0))
}

fn exited(status: ExitStatus, dir: &Path, log_offset: u64, stdio_offset: u64) -> SpawnFailure {
    let recent = diagnostics(dir, log_offset, stdio_offset);
    let port_conflict = recent.contains("Address already in use")
        || recent.contains("Could not create server TCP listening socket")
        || recent.contains("Failed listening on port");
    SpawnFailure {
        port_conflict,
        message: format!("redis-server exited early ({status});\n{recent}"),
    }
}

/// The server's log file and captured stdout/stderr, from the given offsets.
fn diagnostics(dir: &Path, log_offset: u64, stdio_offset: u64) -> String {
    let mut out = String::new();
    for (name, offset) in [(LOG_FILE, log_offset), (STDIO_FILE, stdio_offset)] {
        let path = dir.join(name);
        let text = match std::fs::read(&path) {
            Ok(bytes) => {
                let start = usize::try_from(offset).unwrap_or(0).min(bytes.len());
                String::from_utf8_lossy(&bytes[start..]).into_owned()
            }
            Err(e) => format!("<cannot read: {e}>\n"),
        };
        let _ = write!(out, "--- {} ---\n{text}", path.display());
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// A port that was free a moment ago (bind to port 0, read it, release it).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0")
        .unwrap_or_else(|e| panic!("TestServer: cannot bind 127.0.0.1:0: {e}"));
    listener
        .local_addr()
        .unwrap_or_else(|e| panic!("TestServer: local_addr failed: {e}"))
        .port()
}

/// The `redis-server` binary, located (and if need be installed) once per
/// process.
fn server_binary() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BIN.get_or_init(locate_or_install) {
        Ok(path) => path.clone(),
        Err(message) => panic!("{message}"),
    }
}

fn locate_or_install() -> Result<PathBuf, String> {
    if let Some(value) = std::env::var_os(SERVER_BIN_ENV) {
        let path = PathBuf::from(&value);
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(format!(
                "TestServer: {SERVER_BIN_ENV}={} is not an executable file",
                path.display()
            ))
        };
    }
    if let Some(path) = find_server() {
        return Ok(path);
    }
    let mut notes = String::new();
    match (effective_uid(), find_in_path("apt-get")) {
        (Some(0), Some(apt)) => {
            eprintln!(
                "TestServer: redis-server not found; installing it with \
                 `apt-get update && apt-get install -y redis-server redis-tools`"
            );
            match install_with_apt(&apt) {
                Ok(()) => {
                    if let Some(path) = find_server() {
                        eprintln!("TestServer: installed {}", path.display());
                        return Ok(path);
                    }
                    notes.push_str(" apt-get succeeded but redis-server is still not found.");
                }
                Err(e) => {
                    let _ = write!(notes, " Automatic installation failed: {e}");
                }
            }
        }
        (Some(0), None) => notes.push_str(" (apt-get is not available for automatic install.)"),
        _ => notes.push_str(" (not root, so no automatic install was attempted.)"),
    }
    Err(format!(
        "TestServer: redis-server not found (checked ${SERVER_BIN_ENV}, PATH, \
         /usr/bin/redis-server, /usr/local/bin/redis-server); {INSTALL_HINT}.{notes}"
    ))
}

fn find_server() -> Option<PathBuf> {
    find_in_path("redis-server").or_else(|| {
        ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
            .iter()
            .map(PathBuf::from)
            .find(|p| is_executable(p))
    })
}

fn install_with_apt(apt: &Path) -> Result<(), String> {
    let steps: [&[&str]; 2] = [
        &["update"],
        &["install", "-y", "redis-server", "redis-tools"],
    ];
    for args in steps {
        eprintln!("TestServer: running {} {}", apt.display(), args.join(" "));
        let output = Command::new(apt)
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", apt.display()))?;
        if !output.status.success() {
            return Err(format!(
                "`apt-get {}` failed ({}):\n{}{}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
    Ok(())
}

/// The effective UID, from `/proc/self/status` or `id -u` (no `unsafe`).
fn effective_uid() -> Option<u32> {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        // "Uid:\treal\teffective\tsaved\tfs"
        if let Some(euid) = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
        {
            return Some(euid);
        }
    }
    let output = Command::new("id")
        .arg("-u")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    String::from_utf8_lossy(&output.stdout).trim().parse().ok()
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// A master and one replica of it, ready for writes that must be
/// replicated: the replica is linked and acknowledges a write (`WAIT 1`).
/// The master syncs through a disk RDB (`repl-diskless-sync no`): with
/// diskless sync redis 7.0 may report the replica online seconds before it
/// streams anything to it.
pub fn start_replicated() -> (TestServer, TestServer) {
    let master = TestServer::start_with(&["--repl-diskless-sync", "no"]);
    let port = master.port().to_string();
    let replica = TestServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let mut conn = master.connection();
    wait_until(
        "the replica acknowledges writes",
        Duration::from_secs(10),
        || {
            redis::cmd("SET")
                .arg("redisync-test:replication-probe")
                .arg("1")
                .query::<()>(&mut conn)
                .unwrap();
            redis::cmd("WAIT")
                .arg(1)
                .arg(1000)
                .query::<i64>(&mut conn)
                .unwrap()
                == 1
        },
    );
    (master, replica)
}

/// Polls `check` every 10 ms until it is true; panics after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// `PTTL key` on a raw connection.
pub fn pttl(conn: &mut dyn redis::ConnectionLike, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(conn).unwrap()
}

/// Every text an error carries: `Display`, `Debug`, and its sources', for
/// checks that a password shows nowhere.
pub fn all_error_text(err: &redisync::Error) -> String {
    use std::error::Error as _;
    let mut text = format!("{err}\n{err:?}");
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(&format!("\n{cause}\n{cause:?}"));
        source = cause.source();
    }
    text
}

/// `HGETALL key` on a raw connection.
pub fn hgetall(conn: &mut dyn redis::ConnectionLike, key: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL").arg(key).query(conn).unwrap()
}

/// How many connections are subscribed to `channel` (`PUBSUB NUMSUB`).
/// Per node: on a cluster, sharded subscriptions are counted by
/// `PUBSUB SHARDNUMSUB` on the master of the channel's slot.
pub fn numsub(conn: &mut dyn redis::ConnectionLike, channel: &str) -> i64 {
    let reply: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(conn)
        .unwrap();
    reply.1
}

// ---------------------------------------------------------------------------
// Env: one store, any number of clients on it (the conformance suites)
// ---------------------------------------------------------------------------

/// The default watchdog timeout of [`Env`]'s clients (Redisson's 30 s).
pub const DEFAULT_WATCHDOG: Duration = Duration::from_secs(30);

/// The store the clients of one test share.
pub enum Store {
    /// Clones of one `MemoryBackend` share one keyspace.
    Memory(redisync::MemoryBackend),
    /// A private redis-server, stopped when the test ends.
    Redis(TestServer),
    /// The test binary's shared 3-master, 3-replica cluster.
    #[cfg(feature = "cluster")]
    Cluster(ClusterStore),
}

/// One test's view of the shared cluster: a strong reference (the cluster
/// stops when the last test using it ends) and the ACL user this test's
/// clients log in as, so [`Env::kill_pubsub`] drops this test's pub/sub
/// connections only, not those of the cases running beside it.
#[cfg(feature = "cluster")]
pub struct ClusterStore {
    pub cluster: Arc<cluster::TestCluster>,
    user: String,
}

#[cfg(feature = "cluster")]
impl ClusterStore {
    const PASSWORD: &'static str = "redisync-test";

    fn new() -> ClusterStore {
        let cluster = cluster::shared();
        let user = unique_name("env").replace(':', "-");
        // ACLs are per node: create the user on every one of them.
        let _: Vec<()> = cluster.on_every_node(
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg(&user)
                .arg("on")
                .arg(format!(">{}", Self::PASSWORD))
                .arg("~*")
                .arg("&*")
                .arg("+@all"),
        );
        ClusterStore { cluster, user }
    }

    /// Every node's URL, with this test's credentials.
    fn urls(&self) -> Vec<String> {
        self.cluster
            .nodes
            .iter()
            .map(|node| {
                format!(
                    "redis://{}:{}@127.0.0.1:{}",
                    self.user,
                    Self::PASSWORD,
                    node.port()
                )
            })
            .collect()
    }
}

#[cfg(feature = "cluster")]
impl Drop for ClusterStore {
    fn drop(&mut self) {
        let mut command = redis::cmd("ACL");
        command.arg("DELUSER").arg(&self.user);
        for node in &self.cluster.nodes {
            let _ = command.query::<i64>(&mut node.connection());
        }
    }
}

/// A raw connection to a Redis store ([`Env::redis_connection`]): a plain
/// one to a single server, or a cluster-routed one (each keyed command goes
/// to the master of its slot). Implements `redis::ConnectionLike`, so
/// `redis::cmd(..).query(&mut conn)` works on both.
pub enum StoreConnection {
    Server(redis::Connection),
    #[cfg(feature = "cluster")]
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl StoreConnection {
    fn inner(&mut self) -> &mut dyn redis::ConnectionLike {
        match self {
            StoreConnection::Server(conn) => conn,
            #[cfg(feature = "cluster")]
            StoreConnection::Cluster(conn) => &mut **conn,
        }
    }

    fn inner_ref(&self) -> &dyn redis::ConnectionLike {
        match self {
            StoreConnection::Server(conn) => conn,
            #[cfg(feature = "cluster")]
            StoreConnection::Cluster(conn) => &**conn,
        }
    }
}

impl redis::ConnectionLike for StoreConnection {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        self.inner().req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        self.inner().req_packed_commands(cmd, offset, count)
    }

    // The cluster connection routes by the command's key: forward the
    // command itself, not its packed bytes.
    fn req_command(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
        self.inner().req_command(cmd)
    }

    fn get_db(&self) -> i64 {
        self.inner_ref().get_db()
    }

    fn supports_pipelining(&self) -> bool {
        self.inner_ref().supports_pipelining()
    }

    fn check_connection(&mut self) -> bool {
        self.inner().check_connection()
    }

    fn is_open(&self) -> bool {
        self.inner_ref().is_open()
    }
}

/// What each conformance case gets: a way to make clients (processes) on one
/// store, and the store's test hooks. Every behaviour is written once as a
/// function of an `Env` and run on both backends by [`backend_tests!`].
pub struct Env {
    pub store: Store,
    /// With [`Store::Redis`]: the clients run on an
    /// [`outside::OutsideStore`] (a store written against the public API
    /// only) on that server instead of a `RedisBackend`.
    pub outside: Option<outside::OutsideStore>,
}

/// A behaviour run on the outside store ends with no late copy answered:
/// each one sent by then was refused by its window.
impl Drop for Env {
    fn drop(&mut self) {
        if let Some(store) = &self.outside {
            let (_, _, answered, _) = store.late_copies().counts();
            if !thread::panicking() {
                assert_eq!(
                    answered, 0,
                    "a late copy was answered: its window did not stop it"
                );
            }
        }
    }
}

impl Env {
    pub fn memory() -> Env {
        Env {
            store: Store::Memory(redisync::MemoryBackend::new()),
            outside: None,
        }
    }

    pub fn redis() -> Env {
        Env {
            store: Store::Redis(TestServer::start()),
            outside: None,
        }
    }

    /// On a private redis-server, through an [`outside::OutsideStore`]
    /// (late copies of every third windowed request).
    pub fn outside() -> Env {
        let server = TestServer::start();
        let store = outside::OutsideStore::new(&server.url(), 3);
        Env {
            store: Store::Redis(server),
            outside: Some(store),
        }
    }

    /// On the test binary's shared cluster (started by the first case that
    /// needs it, stopped when the last one using it ends).
    #[cfg(feature = "cluster")]
    pub fn cluster() -> Env {
        Env {
            store: Store::Cluster(ClusterStore::new()),
            outside: None,
        }
    }

    /// A builder on this store, silent (no log noise from expected
    /// failures); the caller adds tunables.
    pub fn builder(&self) -> redisync::ClientBuilder {
        let builder =
            redisync::Client::builder().event_handler(Arc::new(redisync::NopEventHandler));
        if let Some(store) = &self.outside {
            return builder.backend(store.clone());
        }
        match &self.store {
            Store::Memory(backend) => builder.backend(backend.clone()),
            Store::Redis(server) => builder.redis_url(server.url()),
            #[cfg(feature = "cluster")]
            Store::Cluster(store) => builder.cluster(store.urls()),
        }
    }

    /// A new client ("process") with the default watchdog timeout.
    pub fn client(&self) -> redisync::Client {
        self.client_with_watchdog(DEFAULT_WATCHDOG)
    }

    /// A new client ("process") with the given watchdog timeout.
    pub fn client_with_watchdog(&self, timeout: Duration) -> redisync::Client {
        self.builder()
            .watchdog_timeout(timeout)
            .build()
            .expect("building a client on the test store")
    }

    /// A raw connection to the store when it is Redis (for checks that only
    /// Redis can answer, such as a fair lock's queue length); `None` on
    /// memory. On a cluster it routes each keyed command to its slot's
    /// master.
    pub fn redis_connection(&self) -> Option<StoreConnection> {
        match &self.store {
            Store::Memory(_) => None,
            Store::Redis(server) => Some(StoreConnection::Server(server.connection())),
            #[cfg(feature = "cluster")]
            Store::Cluster(store) => Some(StoreConnection::Cluster(Box::new(
                store.cluster.connection(),
            ))),
        }
    }

    /// Drops every open pub/sub connection (`CLIENT KILL TYPE pubsub`).
    pub fn kill_pubsub(&self) {
        match &self.store {
            Store::Memory(backend) => backend.kill_pubsub_connections(),
            Store::Redis(server) => {
                let killed: i64 = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("pubsub")
                    .query(&mut server.connection())
                    .expect("CLIENT KILL TYPE pubsub");
                assert!(killed >= 1, "no pub/sub connection was open to kill");
            }
            // On every node (the subscriber keeps one connection per
            // master), only this test's clients' connections: the cluster
            // is shared with the cases running beside this one.
            #[cfg(feature = "cluster")]
            Store::Cluster(store) => {
                let killed: Vec<i64> = store.cluster.on_every_node(
                    redis::cmd("CLIENT")
                        .arg("KILL")
                        .arg("TYPE")
                        .arg("pubsub")
                        .arg("USER")
                        .arg(&store.user),
                );
                assert!(
                    killed.iter().sum::<i64>() >= 1,
                    "no pub/sub connection was open to kill on any node"
                );
            }
        }
    }

    /// Stores a plain string at `key` (`SET key value`), so lock operations
    /// on it meet `WRONGTYPE`.
    pub fn set_string(&self, key: &str, value: &str) {
        match &self.store {
            Store::Memory(backend) => backend.set_string(key, value),
            Store::Redis(server) => redis::cmd("SET")
                .arg(key)
                .arg(value)
                .query::<()>(&mut server.connection())
                .expect("SET"),
            #[cfg(feature = "cluster")]
            Store::Cluster(store) => redis::cmd("SET")
                .arg(key)
                .arg(value)
                .query::<()>(&mut store.cluster.connection())
                .expect("SET"),
        }
    }
}

/// One `#[test]` per behaviour and backend: `memory::<name>`,
/// `redis::<name>`, `outside::<name>` (a redis-server through
/// [`outside::OutsideStore`], a store written against the public API only)
/// and, with the `cluster` feature, `cluster::<name>` (on the binary's
/// shared cluster) all run `<name>(&Env)` (the caller imports `Env`).
#[allow(unused_macros)]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $( #[test] fn $name() { super::$name(&super::Env::memory()); } )*
        }
        mod redis {
            $( #[test] fn $name() { super::$name(&super::Env::redis()); } )*
        }
        mod outside {
            $( #[test] fn $name() { super::$name(&super::Env::outside()); } )*
        }
        #[cfg(feature = "cluster")]
        mod cluster {
            $( #[test] fn $name() { super::$name(&super::Env::cluster()); } )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use backend_tests;

// ---------------------------------------------------------------------------
// CountingBackend: counts the operations a client sends to its store, loses
// release replies, and takes the store down on demand
// ---------------------------------------------------------------------------

/// What every operation of a [`CountingBackend`] returns while its outage
/// is on: a connection error, as a refused or dropped connection would be.
pub fn outage_error() -> redisync::Error {
    redisync::Error::backend("store down (test outage)", true)
}

/// `Err(outage_error())` while `down` is set.
fn outage_check(down: &AtomicBool) -> redisync::Result<()> {
    if down.load(Ordering::SeqCst) {
        Err(outage_error())
    } else {
        Ok(())
    }
}

/// A [`LockBackend`] that forwards every operation to another backend
/// ([`wrap::Wrapped`], so the defaulted methods too), with three test hooks
/// ([`Counting`]):
///
/// - it counts the calls per script id ([`calls`](Counting::calls)), so a
///   test can tell a parked waiter from one that polls;
/// - it can lose the replies of the next releases after applying them, as a
///   dropped connection would
///   ([`lose_release_replies`](Counting::lose_release_replies));
/// - it has an outage switch ([`set_down`](Counting::set_down)): while
///   down, every round trip (pub/sub sessions and plain server commands
///   included, and the calls on a session already open) fails with
///   [`outage_error`] without reaching the store, which keeps its data for
///   when the switch is turned back up.
///
/// Clones share the counts and the switches, so every client built on
/// clones of one `CountingBackend` sees the same store go down.
pub type CountingBackend = wrap::Wrapped<Counting>;

impl CountingBackend {
    /// Wraps `inner` (e.g. `other_client.backend().clone()`: the same
    /// store), up.
    pub fn new(inner: Arc<dyn LockBackend>) -> Self {
        wrap::Wrapped::around(inner, Counting::default())
    }
}

/// The hooks of a [`CountingBackend`] (which dereferences to it).
#[derive(Clone, Default)]
pub struct Counting {
    calls: Arc<Mutex<HashMap<&'static str, u64>>>,
    lost_release_replies: Arc<AtomicU64>,
    down: Arc<AtomicBool>,
}

impl Counting {
    /// The next `n` releases are applied, then answer with a connection
    /// error (the reply was lost).
    pub fn lose_release_replies(&self, n: u64) {
        self.lost_release_replies.store(n, Ordering::SeqCst);
    }

    /// How many times script `id` (`lock_release`, ...), `publish`,
    /// `with_pubsub` or `server_command` was called so far (calls refused
    /// by an outage included).
    pub fn calls(&self, method: &str) -> u64 {
        let calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        calls.get(method).copied().unwrap_or(0)
    }

    /// Switches the outage on (`true`) or off (`false`).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Whether the outage is on.
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }

    /// What every forwarded call does first: counts it, then fails it while
    /// the outage is on.
    fn enter(&self, method: &'static str) -> redisync::Result<()> {
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        *calls.entry(method).or_insert(0) += 1;
        drop(calls);
        outage_check(&self.down)
    }
}

impl wrap::Hook for Counting {
    /// Counted by script id (`lock_acquire`, ...: the `lua/` file stem) and
    /// forwarded; while [`lose_release_replies`](Self::lose_release_replies)
    /// has some left, a reentrant lock release is applied and its reply
    /// replaced by a connection error.
    fn run_script(&self, inner: &wrap::Store, call: &ScriptCall<'_>) -> redisync::Result<Reply> {
        self.enter(call.script().id())?;
        let reply = inner.run_script(call)?;
        let lost = call.script().id() == "lock_release"
            && self
                .lost_release_replies
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if lost {
            return Err(redisync::Error::backend(
                "connection reset before the reply",
                true,
            ));
        }
        Ok(reply)
    }

    fn publish(&self, inner: &wrap::Store, channel: &str, payload: &str) -> redisync::Result<()> {
        self.enter("publish")?;
        inner.publish(channel, payload)
    }

    /// Forwarded, with the session's connection behind the outage switch.
    fn with_pubsub(&self, inner: &wrap::Store, session: wrap::Session<'_>) -> redisync::Result<()> {
        self.enter("with_pubsub")?;
        let down = &*self.down;
        inner.with_pubsub(&mut |conn| {
            let mut conn = OutageConnection { inner: conn, down };
            session(&mut conn)
        })
    }

    fn server_command(
        &self,
        inner: &wrap::Store,
        args: &[&str],
    ) -> redisync::Result<Vec<redisync::ServerReply>> {
        self.enter("server_command")?;
        inner.server_command(args)
    }
}

/// A pub/sub session of a [`CountingBackend`]: fails every call while the
/// store is down, as a dropped subscriber connection does.
struct OutageConnection<'a> {
    inner: &'a mut dyn PubSubConnection,
    down: &'a AtomicBool,
}

impl PubSubConnection for OutageConnection<'_> {
    fn subscribe(&mut self, channels: &[String]) -> redisync::Result<()> {
        outage_check(self.down)?;
        self.inner.subscribe(channels)
    }

    fn unsubscribe(&mut self, channels: &[String]) -> redisync::Result<()> {
        outage_check(self.down)?;
        self.inner.unsubscribe(channels)
    }

    fn next_message(&mut self, timeout: Duration) -> redisync::Result<Option<Message>> {
        outage_check(self.down)?;
        let message = self.inner.next_message(timeout)?;
        // A message that arrives as the store goes down is lost with it.
        outage_check(self.down)?;
        Ok(message)
    }
}

// ---------------------------------------------------------------------------
// Independent: several independent stores that can fail (MultiLock across
// stores, RedLock)
// ---------------------------------------------------------------------------

/// Connection timeout of [`Independent`]'s Redis clients: short, so a
/// stopped server fails a call fast.
pub const STORE_CONNECTION_TIMEOUT: Duration = Duration::from_millis(300);
/// Response timeout of [`Independent`]'s Redis clients.
pub const STORE_RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);

/// Which kind of stores an [`Independent`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// `MemoryBackend`s, each behind its own [`CountingBackend`] outage
    /// switch.
    Memory,
    /// Private redis-servers.
    Redis,
}

/// One in-memory store of an [`Independent`] environment.
pub struct MemoryStore {
    /// The store itself (for test hooks such as `set_string`).
    pub backend: redisync::MemoryBackend,
    /// What clients use: the store behind its outage switch.
    pub outage: CountingBackend,
}

/// The stores of an [`Independent`] environment.
pub enum Stores {
    /// One `MemoryBackend` each, behind an outage switch.
    Memory(Vec<MemoryStore>),
    /// One private redis-server each (behind a mutex so `down`/`up` take
    /// `&self`).
    Redis(Vec<Mutex<TestServer>>),
}

/// N independent stores (the masters of a RedLock, or the servers a
/// MultiLock's parts live on), each of which can be taken down and brought
/// back: `down(i)` switches a memory store's outage on or kills a Redis
/// server; `up(i)` switches it off (the memory store kept its data) or
/// restarts the server on the same port (empty, like a restart without
/// persistence).
///
/// Build the clients a test needs while their store is up: connecting to a
/// stopped Redis server fails. After `up(i)` on Redis, a client built before
/// the stop may fail its first call on a stale pooled connection; build new
/// ones.
pub struct Independent {
    pub stores: Stores,
}

impl Independent {
    /// `n` independent stores of the given kind.
    pub fn new(kind: StoreKind, n: usize) -> Independent {
        match kind {
            StoreKind::Memory => Independent::memory(n),
            StoreKind::Redis => Independent::redis(n),
        }
    }

    /// `n` independent `MemoryBackend`s.
    pub fn memory(n: usize) -> Independent {
        Independent {
            stores: Stores::Memory(
                (0..n)
                    .map(|_| {
                        let backend = redisync::MemoryBackend::new();
                        let outage = CountingBackend::new(Arc::new(backend.clone()));
                        MemoryStore { backend, outage }
                    })
                    .collect(),
            ),
        }
    }

    /// `n` private redis-servers, started in parallel.
    pub fn redis(n: usize) -> Independent {
        let starting: Vec<_> = (0..n).map(|_| thread::spawn(TestServer::start)).collect();
        Independent {
            stores: Stores::Redis(
                starting
                    .into_iter()
                    .map(|handle| Mutex::new(handle.join().expect("starting a redis-server")))
                    .collect(),
            ),
        }
    }

    pub fn kind(&self) -> StoreKind {
        match &self.stores {
            Stores::Memory(_) => StoreKind::Memory,
            Stores::Redis(_) => StoreKind::Redis,
        }
    }

    /// How many stores.
    pub fn len(&self) -> usize {
        match &self.stores {
            Stores::Memory(stores) => stores.len(),
            Stores::Redis(servers) => servers.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A silent builder on store `i`, with the short Redis timeouts; the
    /// caller adds tunables.
    pub fn builder(&self, i: usize) -> redisync::ClientBuilder {
        let builder =
            redisync::Client::builder().event_handler(Arc::new(redisync::NopEventHandler));
        match &self.stores {
            Stores::Memory(stores) => builder.backend(stores[i].outage.clone()),
            Stores::Redis(servers) => builder
                .redis_url(lock_server(&servers[i]).url())
                .connection_timeout(STORE_CONNECTION_TIMEOUT)
                .response_timeout(STORE_RESPONSE_TIMEOUT),
        }
    }

    /// A new client on store `i` with the default watchdog timeout.
    pub fn client(&self, i: usize) -> redisync::Client {
        self.client_with_watchdog(i, DEFAULT_WATCHDOG)
    }

    /// A new client on store `i` with the given watchdog timeout.
    pub fn client_with_watchdog(&self, i: usize, timeout: Duration) -> redisync::Client {
        self.builder(i)
            .watchdog_timeout(timeout)
            .build()
            .unwrap_or_else(|e| panic!("building a client on store {i}: {e}"))
    }

    /// One "process": a new client on every store, in store order.
    pub fn clients(&self) -> Vec<redisync::Client> {
        self.clients_with_watchdog(DEFAULT_WATCHDOG)
    }

    /// One "process" whose clients have the given watchdog timeout.
    pub fn clients_with_watchdog(&self, timeout: Duration) -> Vec<redisync::Client> {
        (0..self.len())
            .map(|i| self.client_with_watchdog(i, timeout))
            .collect()
    }

    /// Takes store `i` down: memory: every call fails with
    /// [`outage_error`]; Redis: the server is killed.
    pub fn down(&self, i: usize) {
        match &self.stores {
            Stores::Memory(stores) => stores[i].outage.set_down(true),
            Stores::Redis(servers) => lock_server(&servers[i]).stop(),
        }
    }

    /// Brings store `i` back: memory: the outage ends (data kept); Redis:
    /// the server restarts, empty, on the same port.
    pub fn up(&self, i: usize) {
        match &self.stores {
            Stores::Memory(stores) => stores[i].outage.set_down(false),
            Stores::Redis(servers) => lock_server(&servers[i]).restart(),
        }
    }

    /// Stores a plain string at `key` on store `i` (`SET key value`), so
    /// lock operations on it meet `WRONGTYPE`. The store must be up.
    pub fn set_string(&self, i: usize, key: &str, value: &str) {
        match &self.stores {
            Stores::Memory(stores) => stores[i].backend.set_string(key, value),
            Stores::Redis(servers) => redis::cmd("SET")
                .arg(key)
                .arg(value)
                .query::<()>(&mut lock_server(&servers[i]).connection())
                .expect("SET"),
        }
    }
}

fn lock_server(server: &Mutex<TestServer>) -> MutexGuard<'_, TestServer> {
    server.lock().unwrap_or_else(|e| e.into_inner())
}

/// One `#[test]` per behaviour and store kind: `memory_stores::<name>` and
/// `redis_stores::<name>` both run `<name>(StoreKind)` (the caller imports
/// `StoreKind`), which builds the [`Independent`] stores it needs.
#[allow(unused_macros)]
macro_rules! independent_tests {
    ($($name:ident),* $(,)?) => {
        mod memory_stores {
            $( #[test] fn $name() { super::$name(super::StoreKind::Memory); } )*
        }
        mod redis_stores {
            $( #[test] fn $name() { super::$name(super::StoreKind::Redis); } )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use independent_tests;
