//! A network that a test can cut: two network namespaces of its own joined
//! by a veth pair, with a `redis-server` in one of them.
//!
//! Needs root, the `ip` tool (iproute2) and `nft` (nftables: a cut drops
//! packets, see [`Partition::cut`]). Where either is missing, or a
//! namespace cannot be created, [`Partition::create`] panics saying why: a
//! partition test fails, it is never skipped silently.
//!
//! Only TEST-NET-1 addresses (192.0.2.0/24, RFC 5737) are used, and only
//! inside the namespaces created here, which `Drop` deletes (with the veth
//! pair and everything in them) even when the test panics. Names are unique
//! per process and call, so parallel tests and runs do not collide.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::{next_counter, server_binary};

/// The server side's address.
pub const SERVER_ADDR: &str = "192.0.2.1";
/// The client side's address.
pub const CLIENT_ADDR: &str = "192.0.2.2";

/// Runs `ip <args>`; the error text says what failed.
fn ip(args: &[&str]) -> Result<Output, String> {
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip {}`: {e}", args.join(" ")))?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The nftables table a cut adds in each namespace.
const CUT_TABLE: &str = "redisync_cut";

/// `ip netns exec <ns> nft <args>`: its output, or why it failed.
fn nft_output(ns: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new("ip")
        .args(["netns", "exec", ns, "nft"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run nft in {ns}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "`nft {}` in {ns} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Like [`nft_output`], panicking with an install hint on failure.
fn nft(ns: &str, args: &[&str]) {
    if let Err(e) = nft_output(ns, args) {
        panic!(
            "network partition: {e}; the partition drops packets with nftables: \
             install it with `apt-get install -y nftables`"
        );
    }
}

/// Two namespaces, `<base>-srv` (address [`SERVER_ADDR`]) and `<base>-cli`
/// (address [`CLIENT_ADDR`]), joined by a veth pair whose ends are up.
#[derive(Debug)]
pub struct Partition {
    pub server_ns: String,
    pub client_ns: String,
    server_veth: String,
    client_veth: String,
    /// What has been created so far (for `Drop`).
    created_server_ns: bool,
    created_client_ns: bool,
}

impl Partition {
    /// Creates the namespaces and the link. Panics, saying why, when that
    /// is impossible here (not root, no `ip`, namespaces refused).
    pub fn create() -> Partition {
        let uid = super::effective_uid();
        assert_eq!(
            uid,
            Some(0),
            "network partition test: needs root to create network namespaces \
             (effective uid {uid:?}); run the suite as root"
        );
        if let Err(e) = ip(&["-V"]) {
            panic!(
                "network partition test: the `ip` tool (iproute2) is not usable: {e}; \
                 install it with `apt-get install -y iproute2`"
            );
        }
        let n = next_counter();
        let pid = std::process::id();
        let base = format!("rsync-{pid}-{n}");
        // Interface names are at most 15 bytes.
        let tag = format!("{}{n}", pid % 1_000_000);
        let mut partition = Partition {
            server_ns: format!("{base}-srv"),
            client_ns: format!("{base}-cli"),
            server_veth: format!("rsv{tag}s"),
            client_veth: format!("rsv{tag}c"),
            created_server_ns: false,
            created_client_ns: false,
        };
        if let Err(e) = partition.build() {
            panic!("network partition test: cannot set up the namespaces: {e}");
        }
        partition
    }

    fn build(&mut self) -> Result<(), String> {
        ip(&["netns", "add", &self.server_ns])?;
        self.created_server_ns = true;
        ip(&["netns", "add", &self.client_ns])?;
        self.created_client_ns = true;
        // Create the pair inside the server namespace, then move one end:
        // nothing of it ever lives in the host's namespace.
        self.exec_ip(
            &self.server_ns,
            &[
                "link",
                "add",
                &self.server_veth,
                "type",
                "veth",
                "peer",
                "name",
                &self.client_veth,
            ],
        )?;
        self.exec_ip(
            &self.server_ns,
            &["link", "set", &self.client_veth, "netns", &self.client_ns],
        )?;
        for (ns, veth, addr) in [
            (&self.server_ns, &self.server_veth, SERVER_ADDR),
            (&self.client_ns, &self.client_veth, CLIENT_ADDR),
        ] {
            self.exec_ip(ns, &["addr", "add", &format!("{addr}/24"), "dev", veth])?;
            self.exec_ip(ns, &["link", "set", veth, "up"])?;
            self.exec_ip(ns, &["link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// `ip -n <ns> <args>`.
    fn exec_ip(&self, ns: &str, args: &[&str]) -> Result<Output, String> {
        let mut full = vec!["-n", ns];
        full.extend_from_slice(args);
        ip(&full)
    }

    /// The command prefix that runs a program in the client namespace.
    pub fn client_prefix(&self) -> Vec<&str> {
        vec!["ip", "netns", "exec", &self.client_ns]
    }

    /// The command prefix that runs a program in the server namespace (it
    /// reaches the server over that namespace's loopback, which
    /// [`cut_link`](Self::cut_link) leaves alone).
    pub fn server_prefix(&self) -> Vec<&str> {
        vec!["ip", "netns", "exec", &self.server_ns]
    }

    /// Cuts the link by DROPPING every packet: an nftables table
    /// `redisync_cut` with an `output` hook rule `drop` in both namespaces.
    /// Nothing is refused (no "no route", no reset): every send waits, TCP
    /// retransmits, and what was sent is delivered late once [`heal`]
    /// deletes the rule. Panics (saying how to install `nft`) if it cannot,
    /// and confirms the rule is present in both namespaces.
    ///
    /// [`heal`]: Self::heal
    pub fn cut(&self) {
        self.cut_where(false);
    }

    /// Like [`cut`](Self::cut), dropping only what goes out on the veth
    /// pair (`oifname <veth> drop`): the client side is cut off, while
    /// processes in the server namespace still reach the server.
    pub fn cut_link(&self) {
        self.cut_where(true);
    }

    fn cut_where(&self, link_only: bool) {
        for (ns, veth) in [
            (&self.server_ns, &self.server_veth),
            (&self.client_ns, &self.client_veth),
        ] {
            nft(ns, &["add", "table", "inet", CUT_TABLE]);
            nft(
                ns,
                &[
                    "add",
                    "chain",
                    "inet",
                    CUT_TABLE,
                    "out",
                    "{ type filter hook output priority 0 ; policy accept ; }",
                ],
            );
            if link_only {
                let veth = format!("\"{veth}\"");
                nft(
                    ns,
                    &[
                        "add", "rule", "inet", CUT_TABLE, "out", "oifname", &veth, "drop",
                    ],
                );
            } else {
                nft(ns, &["add", "rule", "inet", CUT_TABLE, "out", "drop"]);
            }
        }
        assert!(self.is_cut(), "the drop rule is not in place after the cut");
    }

    /// Whether the drop rule is in place in both namespaces (`nft list`).
    pub fn is_cut(&self) -> bool {
        [&self.server_ns, &self.client_ns].iter().all(|ns| {
            nft_output(ns, &["list", "table", "inet", CUT_TABLE])
                .is_ok_and(|text| text.contains("drop"))
        })
    }

    /// Deletes the drop rule (the table) in both namespaces: held-back
    /// packets are retransmitted and delivered.
    pub fn heal(&self) {
        for ns in [&self.server_ns, &self.client_ns] {
            nft(ns, &["delete", "table", "inet", CUT_TABLE]);
        }
        assert!(
            !self.is_cut(),
            "the drop rule is still there after the heal"
        );
    }

    /// `redis-cli -h <SERVER_ADDR> -p <port> <args>` from the client
    /// namespace, through the link, with a 1 s timeout; `None` if it did not
    /// answer.
    pub fn redis_cli(&self, port: u16, args: &[&str]) -> Option<String> {
        let mut command = Command::new("timeout");
        command
            .args(["2", "ip", "netns", "exec", &self.client_ns, "redis-cli"])
            .args(["-h", SERVER_ADDR, "-p", &port.to_string()])
            .args(args)
            .stdin(Stdio::null());
        let output = command.output().ok()?;
        let text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        (output.status.success() && !text.starts_with("Could not connect")).then_some(text)
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end in it (and so the pair).
        if self.created_client_ns {
            let _ = ip(&["netns", "del", &self.client_ns]);
        }
        if self.created_server_ns {
            let _ = ip(&["netns", "del", &self.server_ns]);
        }
    }
}

/// A `redis-server` in a partition's server namespace, listening on
/// [`SERVER_ADDR`] without persistence. `Drop` kills it by its own handle.
#[derive(Debug)]
pub struct NetnsServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
}

impl NetnsServer {
    /// Starts it and waits until it answers `PING` through the link.
    pub fn start(partition: &Partition) -> NetnsServer {
        let port = 6379;
        let dir = std::env::temp_dir().join(format!(
            "redisync-netns-{}-{}",
            std::process::id(),
            next_counter()
        ));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let log = dir.join("redis.log");
        // `ip netns exec` execs the program: the child's PID is the server's.
        let child = Command::new("ip")
            .args(["netns", "exec", &partition.server_ns])
            .arg(server_binary())
            .args(["--port", &port.to_string(), "--bind", SERVER_ADDR])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            // Reachable only inside the test's own namespaces; without this
            // it refuses every non-loopback client.
            .args(["--protected-mode", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server in {}: {e}", partition.server_ns));
        let server = NetnsServer {
            child: Some(child),
            port,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while partition.redis_cli(port, &["PING"]).as_deref() != Some("PONG") {
            assert!(
                Instant::now() < deadline,
                "redis-server in {} does not answer on {SERVER_ADDR}:{port}; log:\n{}",
                partition.server_ns,
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            thread::sleep(Duration::from_millis(50));
        }
        server
    }

    pub fn url(&self) -> String {
        format!("redis://{SERVER_ADDR}:{}/", self.port)
    }
}

impl Drop for NetnsServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
