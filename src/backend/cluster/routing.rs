//! Sending each script to its slot's master exactly once (feature `cluster`).
//!
//! The `redis` crate's blocking cluster connection retries a command after
//! any I/O error, a dropped connection or a response timeout, on the same
//! or a reconnected socket. For our scripts that is wrong twice over: a
//! script the server ran before the connection dropped would run again
//! (a second reentrant hold, a second permit, a second count-down), and a
//! retry after a timeout reads the late reply of the first try as the
//! reply of the second. So the crate's own retries are off
//! (`ClusterClientBuilder::retries(0)`) and [`RoutedConnection`] does the
//! retrying that is safe: only after a reply that proves the script did
//! not run.
//!
//! | reply | meaning | what happens |
//! |---|---|---|
//! | `MOVED slot host:port` | the slot has a new master | the connection is replaced by one with a fresh slot map (the crate refreshes it only in the retries we turned off), and the script sent to the slot's master again; a second MOVED is followed to the node it names |
//! | `ASK slot host:port` | the slot is migrating | `ASKING`, then sent once more to that node |
//! | `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN` | not run, retry later | sent again after a short, growing pause, within the response timeout |
//! | an I/O error or a timeout | may have run | returned as it is: the caller's outcome is unknown (a connection error), and the pool drops the connection |
//!
//! The connection remembers which node ran the last script, so that
//! replica acknowledgement's `WAIT` goes to that very master: the crate
//! would send a plain `WAIT` to every master and keep the smallest count,
//! so one lagging replica anywhere would fail writes everywhere.

use std::time::{Duration, Instant};

use std::sync::Arc;

use redis::cluster::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ConnectionLike, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

use super::slots::slot;

/// Redirections followed for one script (a MOVED then an ASK is the most a
/// resharding produces).
const MAX_REDIRECTS: u32 = 3;
/// The first pause after a TRYAGAIN, CLUSTERDOWN or MASTERDOWN; it doubles
/// each time, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_millis(200);

/// Where a routed connection gets a replacement with a fresh slot map
/// (implemented by the cluster's discovery), so routing does not depend on
/// how the cluster is found.
pub(crate) trait SlotMapSource: Send + Sync {
    /// A cluster connection with a fresh slot map.
    fn cluster_connection(&self) -> Result<ClusterConnection, RedisError>;

    /// How long one call may take to answer.
    fn response_timeout(&self) -> Duration;

    /// How long opening a connection may take.
    fn connection_timeout(&self) -> Duration;
}

/// A cluster connection that runs scripts (`EVALSHA`/`EVAL`) on their
/// first key's slot master without ever sending one twice after it may
/// have run, and runs `WAIT` where the last script ran. Every other
/// command goes through the crate's own routing.
pub(crate) struct RoutedConnection {
    conn: ClusterConnection,
    /// Where a replacement with a fresh slot map comes from.
    target: Arc<dyn SlotMapSource>,
    /// The node the last script ran on: its slot's master, or the node a
    /// redirection named.
    last_node: Option<SingleNodeRoutingInfo>,
}

impl RoutedConnection {
    pub(crate) fn new(conn: ClusterConnection, target: Arc<dyn SlotMapSource>) -> Self {
        RoutedConnection {
            conn,
            target,
            last_node: None,
        }
    }

    /// Sets the read and write timeout of every node socket, and of those
    /// opened later (the crate keeps it for them): the caller's deadline
    /// reaches whichever node a script is routed or redirected to.
    pub(crate) fn set_timeout(&self, timeout: Duration) -> RedisResult<()> {
        let timeout = Some(timeout.max(Duration::from_millis(1)));
        self.conn.set_read_timeout(timeout)?;
        self.conn.set_write_timeout(timeout)
    }

    /// `WAIT replicas timeout_ms` on the master that ran the last script
    /// (the crate's routing would ask every master). Returns how many
    /// replicas acknowledged.
    pub(crate) fn wait_for_replicas(&mut self, replicas: u32, timeout_ms: u64) -> RedisResult<i64> {
        let Some(node) = self.last_node.clone() else {
            return Err(RedisError::from((
                ErrorKind::Client,
                "WAIT before any script: no node to ask",
            )));
        };
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(timeout_ms);
        let reply = self
            .conn
            .route_command(&wait, RoutingInfo::SingleNode(node))?;
        redis::from_redis_value(reply.extract_error()?).map_err(RedisError::from)
    }

    /// Sends `cmd` to every master of the slot map (read through this
    /// connection with `CLUSTER SLOTS`; an empty host is `seed_host`), in
    /// the order of their slot ranges: each master's `host:port`, its
    /// reply or error, and the round trip of `cmd` alone. Only the slot
    /// map's read fails the whole call.
    pub(crate) fn on_every_master(
        &mut self,
        cmd: &Cmd,
        seed_host: &str,
    ) -> RedisResult<Vec<(String, RedisResult<Value>, Duration)>> {
        let mut slots_cmd = redis::cmd("CLUSTER");
        slots_cmd.arg("SLOTS");
        let slots = self.conn.req_command(&slots_cmd)?;
        let mut masters: Vec<String> = Vec::new();
        for range in super::discovery::parse_slots(&slots, seed_host) {
            if !masters.contains(&range.node) {
                masters.push(range.node);
            }
        }
        let mut replies = Vec::with_capacity(masters.len());
        for node in masters {
            let Some((host, port)) = node
                .rsplit_once(':')
                .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)))
            else {
                continue;
            };
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
            let started = Instant::now();
            let reply = self
                .conn
                .route_command(cmd, routing)
                .and_then(Value::extract_error);
            replies.push((node, reply, started.elapsed()));
        }
        Ok(replies)
    }

    /// A cluster connection with a fresh slot map, within the caller's
    /// deadline if there is one.
    fn fresh_connection(&self) -> RedisResult<ClusterConnection> {
        let target = Arc::clone(&self.target);
        crate::backend::connect::open_within(
            crate::deadline::cap(self.target.connection_timeout()),
            move || target.cluster_connection(),
        )
    }

    /// Runs a script on `slot`'s master, following redirections and
    /// retrying only replies that prove it did not run.
    ///
    /// Under the caller's deadline (see `deadline`): a retry or redirection
    /// is not started after it has passed (the last reply is returned
    /// instead), each one gets what is left of it, and the TRYAGAIN pauses
    /// stop within it.
    fn run_script(&mut self, cmd: &Cmd, slot: u16) -> RedisResult<Value> {
        let started = Instant::now();
        let budget = crate::deadline::cap(self.target.response_timeout());
        let by_slot = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
        let mut node = by_slot.clone();
        let mut asking = false;
        let mut redirects = 0;
        let mut refreshed = false;
        let mut pause = FIRST_PAUSE;
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) {
                // A replacement connection starts with the response
                // timeout; and time has passed since the last try.
                self.set_timeout(crate::deadline::cap(self.target.response_timeout()))?;
            }
            let reply = if asking {
                self.conn
                    .route_command(&redis::cmd("ASKING"), RoutingInfo::SingleNode(node.clone()))
                    .and_then(Value::extract_error)
                    .and_then(|_| {
                        self.conn
                            .route_command(cmd, RoutingInfo::SingleNode(node.clone()))
                    })
            } else {
                self.conn
                    .route_command(cmd, RoutingInfo::SingleNode(node.clone()))
            };
            // A reply is an error value or a returned error, by path.
            let err = match reply.and_then(Value::extract_error) {
                Ok(value) => {
                    self.last_node = Some(node);
                    return Ok(value);
                }
                Err(err) => err,
            };
            if crate::deadline::passed() {
                return Err(err);
            }
            match err.kind() {
                ErrorKind::Server(ServerErrorKind::Moved) if redirects < MAX_REDIRECTS => {
                    redirects += 1;
                    asking = false;
                    if refreshed {
                        // The cluster has not settled yet: go where told.
                        node = redirect_target(&err).ok_or(err)?;
                    } else {
                        refreshed = true;
                        // A new slot map also sends SCRIPT LOAD (after a
                        // NOSCRIPT) to the new master. Under a deadline it
                        // is given up on when the deadline comes (a frozen
                        // node would hold the crate's steps), and the
                        // redirection is followed on this connection.
                        match self.fresh_connection() {
                            Ok(conn) => {
                                self.conn = conn;
                                node = by_slot.clone();
                            }
                            Err(refresh) => {
                                node = redirect_target(&err).ok_or(refresh)?;
                            }
                        }
                    }
                }
                ErrorKind::Server(ServerErrorKind::Ask) if redirects < MAX_REDIRECTS => {
                    redirects += 1;
                    asking = true;
                    node = redirect_target(&err).ok_or(err)?;
                }
                ErrorKind::Server(
                    ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown,
                ) if started.elapsed() + pause < budget => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                _ => return Err(err),
            }
        }
    }
}

/// The node a MOVED or ASK reply names.
fn redirect_target(err: &RedisError) -> Option<SingleNodeRoutingInfo> {
    let (address, _slot) = err.redirect_node()?;
    let (host, port) = address.rsplit_once(':')?;
    Some(SingleNodeRoutingInfo::ByAddress {
        host: host.to_owned(),
        port: port.parse().ok()?,
    })
}

/// The slot of a script command's first key: `EVALSHA sha numkeys key…`
/// (or `EVAL`). `None` for any other command, or a script without keys.
fn script_slot(cmd: &Cmd) -> Option<u16> {
    let mut args = cmd.args_iter().map(|arg| match arg {
        redis::Arg::Simple(bytes) => bytes,
        _ => &[][..],
    });
    let name = args.next()?;
    if !(name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL")) {
        return None;
    }
    let _script = args.next()?;
    let keys: usize = std::str::from_utf8(args.next()?).ok()?.parse().ok()?;
    if keys == 0 {
        return None;
    }
    Some(slot(args.next()?))
}

impl ConnectionLike for RoutedConnection {
    fn req_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match script_slot(cmd) {
            Some(slot) => self.run_script(cmd, slot),
            None => self.conn.req_command(cmd),
        }
    }

    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.conn.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.conn.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.conn.check_connection()
    }

    fn is_open(&self) -> bool {
        self.conn.is_open()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_slot_is_the_first_keys() {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg("abc")
            .arg(2)
            .arg("{lock}")
            .arg("other")
            .arg("x");
        assert_eq!(
            script_slot(&evalsha),
            Some(super::super::slots::slot(b"lock"))
        );
        let mut eval = redis::cmd("eval");
        eval.arg("return 1").arg(1).arg("k");
        assert_eq!(script_slot(&eval), Some(super::super::slots::slot(b"k")));
        let mut keyless = redis::cmd("EVALSHA");
        keyless.arg("abc").arg(0);
        assert_eq!(script_slot(&keyless), None);
        assert_eq!(script_slot(redis::cmd("SCRIPT").arg("LOAD").arg("x")), None);
        assert_eq!(script_slot(&redis::cmd("PING")), None);
    }

    #[test]
    fn redirections_name_their_node() {
        let moved = RedisError::from((
            ErrorKind::Server(ServerErrorKind::Moved),
            "An error was signalled by the server",
            "3999 127.0.0.1:6381".to_owned(),
        ));
        assert_eq!(
            redirect_target(&moved),
            Some(SingleNodeRoutingInfo::ByAddress {
                host: "127.0.0.1".to_owned(),
                port: 6381
            })
        );
        let io = RedisError::from(std::io::Error::other("reset"));
        assert_eq!(redirect_target(&io), None);
    }
}
