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
//! Each script goes to a node named by address (the slot's master in a
//! slot map this connection read itself, or the node a redirection
//! named), because a writing script's window (see `Script::is_windowed`)
//! is in that node's clock: the pool sends [`NODE_WINDOW`] as the window,
//! and before each try this connection puts in its place the end of the
//! window by the clock of the node the try goes to. Each node's offset is
//! read with one `TIME` the first time a script goes to it on this
//! connection (the pool's connections to one server read it on open; here
//! one routed connection spans several servers' clocks). A redirection,
//! or a retry after TRYAGAIN, is a new try with a new window.
//!
//! A NOSCRIPT reply's `SCRIPT LOAD` goes to the node that sent it, not
//! (as the crate would) to every node, where one frozen replica would hold
//! it for a response timeout.
//!
//! The connection remembers which node ran the last script, so that
//! replica acknowledgement's `WAIT` goes to that very master: the crate
//! would send a plain `WAIT` to every master and keep the smallest count,
//! so one lagging replica anywhere would fail writes everywhere.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// The window end the pool gives a routed connection's writing scripts
/// (see `pool::Conn::window_end`): each try replaces it with the end by its
/// node's clock. Sent as it is (no script is routed without a key), it is
/// a window that never ends.
pub(crate) const NODE_WINDOW: i64 = i64::MAX;

/// A node's address, as a slot map or a redirection names it.
type NodeAddr = (String, u16);

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

    /// The host a slot map's empty host stands for.
    fn seed_host(&self) -> String;
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
    /// The masters' slot ranges, read with `CLUSTER SLOTS` through this
    /// connection (sorted by their first slot), and the owners MOVED
    /// replies named since.
    slots: Vec<(u16, u16, NodeAddr)>,
    moved: HashMap<u16, NodeAddr>,
    /// How far each node's clock is ahead of ours, in ms (`None`: the node
    /// refused `TIME`, its scripts carry no window), read on the first
    /// script sent to it.
    offsets: HashMap<NodeAddr, Option<i64>>,
    /// The best round trip of a `TIME` reading from each node, ms (see
    /// `clock::Reading::is_precise`).
    round_trips: HashMap<NodeAddr, i64>,
    /// The read timeout now set on every node socket: a try's window is
    /// this, and a margin, from when it is sent.
    timeout: Duration,
    /// The node that last answered a script with NOSCRIPT: the `SCRIPT
    /// LOAD` that follows goes there only (the crate would send it to
    /// every node, replicas included, and one frozen replica would hold
    /// the call for a whole response timeout).
    noscript_node: Option<SingleNodeRoutingInfo>,
}

impl RoutedConnection {
    pub(crate) fn new(conn: ClusterConnection, target: Arc<dyn SlotMapSource>) -> Self {
        let timeout = target.response_timeout();
        RoutedConnection {
            conn,
            target,
            last_node: None,
            slots: Vec::new(),
            moved: HashMap::new(),
            offsets: HashMap::new(),
            round_trips: HashMap::new(),
            timeout,
            noscript_node: None,
        }
    }

    /// Takes the slot map a `CLUSTER SLOTS` reply gives (an empty host is
    /// `seed_host`): scripts go to the masters it names.
    pub(crate) fn set_slot_map(&mut self, reply: &Value, seed_host: &str) {
        let mut slots = super::slots::parse_slot_owners(reply, seed_host);
        slots.sort_by_key(|(start, _, _)| *start);
        self.slots = slots;
        self.moved.clear();
    }

    /// The master of `slot`: the last MOVED reply's for it, or the slot
    /// map's.
    fn owner(&self, slot: u16) -> Option<NodeAddr> {
        if let Some(node) = self.moved.get(&slot) {
            return Some(node.clone());
        }
        slot_owner(&self.slots, slot)
    }

    /// Reads the slot map again through the crate's connection (when a
    /// slot has no owner in the one read before). Best effort.
    fn reread_slot_map(&mut self) {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        if let Ok(reply) = self.conn.req_command(&cmd).and_then(Value::extract_error) {
            let seed_host = self.target.seed_host();
            self.set_slot_map(&reply, &seed_host);
        }
    }

    /// The clock offset of `node`, read with `TIME` the first time.
    /// `Ok(None)`: the node refused `TIME`. An error: it did not answer
    /// (the script was not sent).
    fn offset_of(&mut self, node: &NodeAddr) -> RedisResult<Option<i64>> {
        if let Some(offset) = self.offsets.get(node) {
            return Ok(*offset);
        }
        let routing = RoutingInfo::SingleNode(by_address(node));
        let before = crate::clock::monotonic_ms();
        let time = self
            .conn
            .route_command(&redis::cmd("TIME"), routing)
            .and_then(Value::extract_error);
        let after = crate::clock::monotonic_ms();
        let offset = match time {
            Ok(value) => {
                let (seconds, micros): (i64, i64) = redis::from_redis_value(value)?;
                let server = seconds.saturating_mul(1000).saturating_add(micros / 1000);
                let reading = crate::clock::Reading {
                    server_ms: server,
                    before_ms: before,
                    after_ms: after,
                };
                let best = self.round_trips.get(node).copied();
                let round_trip = reading.round_trip_ms();
                if best.is_none_or(|best| round_trip < best) {
                    self.round_trips.insert(node.clone(), round_trip);
                }
                if !reading.is_precise(best) {
                    // Never ahead (see `Reading::offset`), and not kept:
                    // the next request to the node reads it again.
                    return Ok(Some(reading.offset(None, best)));
                }
                Some(reading.offset(None, best))
            }
            // Refused (an ACL without TIME): no window on this node.
            Err(err) if err.code().is_some() && !is_redirect_or_retry(&err) => None,
            Err(err) => return Err(err),
        };
        self.offsets.insert(node.clone(), offset);
        Ok(offset)
    }

    /// `cmd` with its window (a last argument equal to [`NODE_WINDOW`])
    /// replaced by the end of a window sent now to `node`; `None` when it
    /// carries no window.
    fn windowed_for(&mut self, cmd: &Cmd, node: Option<&NodeAddr>) -> RedisResult<Option<Cmd>> {
        if !carries_node_window(cmd) {
            return Ok(None);
        }
        let end = match node {
            Some(node) => self.offset_of(node)?.map_or(0, |offset| {
                crate::backend::script::window_end(offset, self.timeout)
            }),
            // No owner known: no clock to write the window in.
            None => 0,
        };
        Ok(Some(with_window_end(cmd, end)))
    }

    /// Sets the read and write timeout of every node socket, and of those
    /// opened later (the crate keeps it for them): the caller's deadline
    /// reaches whichever node a script is routed or redirected to.
    pub(crate) fn set_timeout(&mut self, timeout: Duration) -> RedisResult<()> {
        let timeout = timeout.max(Duration::from_millis(1));
        self.conn.set_read_timeout(Some(timeout))?;
        self.conn.set_write_timeout(Some(timeout))?;
        self.timeout = timeout;
        Ok(())
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
        for range in super::slots::parse_slots(&slots, seed_host) {
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
        crate::backend::redis::connect::open_within(
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
        if self.owner(slot).is_none() {
            self.reread_slot_map();
        }
        // The node of this try, by address: its window is in its clock.
        // `None` only when no slot map names the slot's master: the
        // crate's own routing then picks the node, and the script carries
        // no window.
        let mut node = self.owner(slot);
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
            let routing = node.as_ref().map_or_else(
                || SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master)),
                by_address,
            );
            // Each try's window, by its node's clock, from now (the TIME
            // that reads a new node's clock goes before ASKING).
            let windowed = self.windowed_for(cmd, node.as_ref())?;
            let sent = windowed.as_ref().unwrap_or(cmd);
            let reply = if asking {
                self.conn
                    .route_command(
                        &redis::cmd("ASKING"),
                        RoutingInfo::SingleNode(routing.clone()),
                    )
                    .and_then(Value::extract_error)
                    .and_then(|_| {
                        self.conn
                            .route_command(sent, RoutingInfo::SingleNode(routing.clone()))
                    })
            } else {
                self.conn
                    .route_command(sent, RoutingInfo::SingleNode(routing.clone()))
            };
            // A reply is an error value or a returned error, by path.
            let err = match reply.and_then(Value::extract_error) {
                Ok(value) => {
                    self.last_node = Some(routing);
                    return Ok(value);
                }
                Err(err) => err,
            };
            if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) {
                self.noscript_node = Some(routing);
                return Err(err);
            }
            if crate::deadline::passed() {
                return Err(err);
            }
            match err.kind() {
                ErrorKind::Server(ServerErrorKind::Moved) if redirects < MAX_REDIRECTS => {
                    redirects += 1;
                    asking = false;
                    let target = redirect_address(&err).ok_or(err)?;
                    // The slot's master now, for this connection's later
                    // scripts too.
                    self.moved.insert(slot, target.clone());
                    node = Some(target);
                    if !refreshed {
                        refreshed = true;
                        // A new slot map also sends SCRIPT LOAD (after a
                        // NOSCRIPT) to the new master. Under a deadline it
                        // is given up on when the deadline comes (a frozen
                        // node would hold the crate's steps), and the
                        // redirection is followed on this connection.
                        if let Ok(conn) = self.fresh_connection() {
                            self.conn = conn;
                            // Its sockets are new: their timeout, and the
                            // nodes' clocks, are read again.
                            self.offsets.clear();
                        }
                    }
                }
                ErrorKind::Server(ServerErrorKind::Ask) if redirects < MAX_REDIRECTS => {
                    redirects += 1;
                    asking = true;
                    node = Some(redirect_address(&err).ok_or(err)?);
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

/// The master of `slot` in `slots` (sorted by first slot).
fn slot_owner(slots: &[(u16, u16, NodeAddr)], slot: u16) -> Option<NodeAddr> {
    let index = slots.partition_point(|(start, _, _)| *start <= slot);
    let (start, end, node) = slots.get(index.checked_sub(1)?)?;
    (*start <= slot && slot <= *end).then(|| node.clone())
}

/// Whether `cmd`'s last argument is [`NODE_WINDOW`] (the pool's window of
/// a writing script on a cluster).
fn carries_node_window(cmd: &Cmd) -> bool {
    // `NODE_WINDOW` as `ScriptCall::window_arg` writes it.
    const PLACEHOLDER: &[u8] = b"9223372036854775807";
    matches!(
        cmd.args_iter().last(),
        Some(redis::Arg::Simple(last)) if last == PLACEHOLDER
    )
}

/// `cmd` with its last argument replaced by `end`.
fn with_window_end(cmd: &Cmd, end: i64) -> Cmd {
    let count = cmd.args_iter().len();
    let mut windowed = Cmd::new();
    for (index, arg) in cmd.args_iter().enumerate() {
        match arg {
            _ if index + 1 == count => windowed.arg(end),
            redis::Arg::Simple(bytes) => windowed.arg(bytes),
            // A script command has no cursor.
            _ => windowed.arg(&b""[..]),
        };
    }
    windowed
}

/// Routing to `node` by its address.
fn by_address(node: &NodeAddr) -> SingleNodeRoutingInfo {
    SingleNodeRoutingInfo::ByAddress {
        host: node.0.clone(),
        port: node.1,
    }
}

/// Whether a server's error reply says "not here" or "not now" rather
/// than refusing the command itself.
fn is_redirect_or_retry(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
        )
    )
}

/// The address a MOVED or ASK reply names.
fn redirect_address(err: &RedisError) -> Option<NodeAddr> {
    let (address, _slot) = err.redirect_node()?;
    let (host, port) = address.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}

/// The node a MOVED or ASK reply names.
#[cfg(test)]
fn redirect_target(err: &RedisError) -> Option<SingleNodeRoutingInfo> {
    redirect_address(err).map(|node| by_address(&node))
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

/// Whether `cmd` is `SCRIPT LOAD`.
fn is_script_load(cmd: &Cmd) -> bool {
    let mut args = cmd.args_iter().map(|arg| match arg {
        redis::Arg::Simple(bytes) => bytes,
        _ => &[][..],
    });
    args.next()
        .is_some_and(|name| name.eq_ignore_ascii_case(b"SCRIPT"))
        && args
            .next()
            .is_some_and(|sub| sub.eq_ignore_ascii_case(b"LOAD"))
}

impl ConnectionLike for RoutedConnection {
    fn req_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        if let Some(slot) = script_slot(cmd) {
            return self.run_script(cmd, slot);
        }
        if is_script_load(cmd)
            && let Some(node) = self.noscript_node.take()
        {
            return self.conn.route_command(cmd, RoutingInfo::SingleNode(node));
        }
        self.conn.req_command(cmd)
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
        assert!(is_script_load(redis::cmd("script").arg("load").arg("x")));
        assert!(!is_script_load(redis::cmd("SCRIPT").arg("FLUSH")));
        assert!(!is_script_load(&redis::cmd("PING")));
    }

    static WINDOWED: crate::backend::Script = crate::backend::Script::new(
        "windowed",
        "windowed",
        crate::backend::script::WINDOW_PRELUDE,
    );

    #[test]
    fn the_window_placeholder_is_replaced_and_nothing_else() {
        use crate::backend::{Effect, Resend, ScriptCall};
        let mut windowed = redis::cmd("EVALSHA");
        windowed
            .arg("abc")
            .arg(1)
            .arg("{lock}")
            .arg("30000")
            .arg(NODE_WINDOW);
        assert!(carries_node_window(&windowed));
        assert_eq!(
            ScriptCall::new(&WINDOWED, Resend::Harmless, Effect::Read).window_arg(NODE_WINDOW),
            Some("9223372036854775807".to_owned()),
            "the placeholder as the pool sends it"
        );
        let sent = with_window_end(&windowed, 1_700_000_000_123);
        let args: Vec<Vec<u8>> = sent
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(
            args,
            [
                &b"EVALSHA"[..],
                b"abc",
                b"1",
                b"{lock}",
                b"30000",
                b"1700000000123"
            ]
        );
        assert!(!carries_node_window(&sent));
        let mut plain = redis::cmd("EVALSHA");
        plain.arg("abc").arg(1).arg("{lock}").arg("0");
        assert!(!carries_node_window(&plain));
        assert!(!carries_node_window(&redis::cmd("PING")));
    }

    #[test]
    fn a_slot_s_owner_is_its_range_s_master() {
        let node = |port: u16| ("127.0.0.1".to_owned(), port);
        let slots = vec![
            (0, 5460, node(7000)),
            (5461, 10922, node(7001)),
            (10923, 16383, node(7002)),
        ];
        assert_eq!(slot_owner(&slots, 0), Some(node(7000)));
        assert_eq!(slot_owner(&slots, 5460), Some(node(7000)));
        assert_eq!(slot_owner(&slots, 5461), Some(node(7001)));
        assert_eq!(slot_owner(&slots, 16383), Some(node(7002)));
        let gap = vec![(0, 100, node(7000)), (200, 300, node(7001))];
        assert_eq!(slot_owner(&gap, 150), None);
        assert_eq!(slot_owner(&gap, 301), None);
        assert_eq!(slot_owner(&[], 7), None);
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
