//! Redis Cluster (feature `cluster`): routed scripts and sharded pub/sub.
//!
//! Commands go through the `redis` crate's blocking cluster connection (one
//! per pooled connection), wrapped by [`RoutedConnection`] (see
//! `cluster_routing`): it sends each script to the master of its first
//! key's slot (every key of a primitive shares that slot, see `keys.rs`)
//! and never twice after it may have run. The crate's connection keeps its
//! slot map until it is told otherwise, so after a master is killed it
//! would go on asking the dead address: a cluster connection that failed
//! with anything but a server reply is discarded by the pool
//! (`Target::discards_after` in `redis.rs`), and its replacement reads the
//! slot map afresh, from the seeds or, when none answers, from the nodes
//! the last connection saw. A NOSCRIPT reply makes `Script::invoke` send
//! `SCRIPT LOAD`, which the cluster connection routes to every master,
//! then retry.
//!
//! Messages use sharded pub/sub, as Redisson does on Redis 7+ clusters: the
//! scripts `SPUBLISH` (see `Script::sharded_code`) and the subscriber `SSUBSCRIBE`s
//! each channel on the master that owns its slot. A sharded subscription
//! must be made on that very node, and the `redis` crate's blocking
//! connection can neither do that for us nor be read from one thread while
//! another writes to it; so [`ClusterPubSub`] keeps one TCP connection
//! per master, a reader thread per connection that parses the replies (the
//! crate's RESP [`Parser`]) into one crossbeam channel, and writes
//! (S)SUBSCRIBE commands on a clone of the socket.
//!
//! TLS (feature `tls`, `rediss://` seeds, all of them): the routed
//! connections are the `redis` crate's, which derives every node's TLS from
//! the seeds' scheme and the certificates given to its builder. The
//! pub/sub connections are ours: a rustls session per master, configured by
//! `tls::TlsSettings::client_config` (the same roots and client identity)
//! and verified against the node's host from the slot map. A session
//! cannot be cloned like a socket, so it is shared between the reader
//! thread and the writer behind a mutex, each doing its own I/O on its own
//! clone of the TCP socket (see [`tls_io`]): the reader blocks on the
//! socket without the lock, and a command is sent at once, with no read
//! timeout or extra thread in the way. The slot map is read over a TLS
//! `redis::Client` with the same certificates.
//!
//! Whatever may have moved a slot (an unrequested `sunsubscribe`, which a
//! master sends when it loses the slot, a MOVED reply, a closed connection)
//! ends the session with a connection error. The subscriber then reconnects
//! with a fresh slot map, resubscribes everything and wakes every waiter
//! (its usual recovery path), so a lost message costs one retry.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use redis::cluster::{ClusterClient, ClusterConnection};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Parser, RedisError, Value};

use super::cluster_routing::RoutedConnection;
use super::{Message, PubSubConnection, RedisOptions};
use crate::{Error, Result};

/// The number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16_384;

/// The seeds of a cluster and a client for its routed connections.
pub(super) struct ClusterTarget {
    client: ClusterClient,
    seeds: Vec<ConnectionInfo>,
    /// The nodes the last routed connection saw in the slot map, and a
    /// client seeded with them: the fallback when no seed answers any more
    /// (the seeds were replaced, or the only one died).
    discovered: Mutex<Option<Discovered>>,
    /// The first seed's settings, for the discovered nodes.
    template: ConnectionInfo,
    connection_timeout: Duration,
    response_timeout: Duration,
    description: String,
    /// With `rediss://` seeds: the rustls configuration of our own pub/sub
    /// sockets, and the certificates (if any were set) of the plain
    /// `redis::Client` that reads the slot map.
    #[cfg(feature = "tls")]
    tls: Option<(Arc<rustls::ClientConfig>, Option<redis::TlsCertificates>)>,
}

impl ClusterTarget {
    /// Checks the seed URLs (`redis://[user:password@]host:port`, or all
    /// of them `rediss://` with the `tls` feature) and builds the client;
    /// connects to nothing yet.
    pub(super) fn new(urls: &[String], options: &RedisOptions) -> Result<Arc<Self>> {
        let mut seeds = Vec::with_capacity(urls.len());
        let mut first_is_tls = None;
        for (index, url) in urls.iter().enumerate() {
            super::tls::require_tls_feature("cluster_urls", url)?;
            // No error quotes the URL: it may hold a password.
            let info = url.as_str().into_connection_info().map_err(|err| {
                Error::invalid(
                    "cluster_urls",
                    format!("URL #{} is not a redis:// URL: {:?}", index + 1, err.kind()),
                )
            })?;
            let is_tls = match info.addr() {
                ConnectionAddr::Tcp(..) => false,
                ConnectionAddr::TcpTls { insecure: true, .. } => {
                    return Err(Error::invalid(
                        "cluster_urls",
                        format!(
                            "URL #{}: #insecure (no certificate verification) is not supported: \
                             trust your CA with tls_root_certificate instead",
                            index + 1
                        ),
                    ));
                }
                ConnectionAddr::TcpTls { .. } => true,
                _ => {
                    return Err(Error::invalid(
                        "cluster_urls",
                        format!(
                            "URL #{}: only redis://host:port or rediss://host:port is supported \
                             with a cluster (no Unix socket)",
                            index + 1
                        ),
                    ));
                }
            };
            match first_is_tls {
                None => first_is_tls = Some(is_tls),
                Some(first) if first != is_tls => {
                    return Err(Error::invalid(
                        "cluster_urls",
                        format!(
                            "URL #{} is {} but URL #1 is {}: every seed must use the same scheme",
                            index + 1,
                            if is_tls { "rediss://" } else { "redis://" },
                            if first { "rediss://" } else { "redis://" },
                        ),
                    ));
                }
                Some(_) => {}
            }
            if info.redis_settings().db() != 0 {
                return Err(Error::invalid(
                    "cluster_urls",
                    format!("URL #{}: a cluster has only database 0", index + 1),
                ));
            }
            seeds.push(info);
        }
        let Some(template) = seeds.first().cloned() else {
            return Err(Error::invalid(
                "cluster_urls",
                "at least one node URL is needed",
            ));
        };
        #[cfg(feature = "tls")]
        let tls = if first_is_tls == Some(true) {
            // The crate derives every node's TLS from the seeds' scheme
            // (and the certificates given to `client_for`), for the nodes
            // it discovers too.
            let provider = super::tls::crypto_provider();
            let certificates = if options.tls.is_set() {
                Some(options.tls.certificates(&provider)?)
            } else {
                None
            };
            Some((options.tls.client_config(&provider)?, certificates))
        } else if options.tls.is_set() {
            return Err(Error::invalid(
                "cluster_urls",
                "TLS certificates were given but the URLs are not rediss://",
            ));
        } else {
            None
        };
        #[cfg(feature = "tls")]
        let certificates = tls
            .as_ref()
            .and_then(|(_, certificates)| certificates.as_ref());
        #[cfg(not(feature = "tls"))]
        let certificates = None;
        let client = client_for(
            seeds.clone(),
            options.get_connection_timeout(),
            options.get_response_timeout(),
            certificates,
        )
        .map_err(|err| Error::invalid("cluster_urls", err.to_string()))?;
        let description = format!(
            "cluster {}",
            seeds
                .iter()
                .map(|info| info.addr().to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        Ok(Arc::new(ClusterTarget {
            client,
            seeds,
            discovered: Mutex::new(None),
            template,
            connection_timeout: options.get_connection_timeout(),
            response_timeout: options.get_response_timeout(),
            description,
            #[cfg(feature = "tls")]
            tls,
        }))
    }

    /// The seeds' addresses, for messages (no credentials).
    pub(super) fn description(&self) -> &str {
        &self.description
    }

    /// A routed connection (to every node it needs, made as needed).
    /// Each new one notes the nodes of the slot map it read, for when no
    /// seed answers any more.
    pub(super) fn connect(self: &Arc<Self>) -> std::result::Result<RoutedConnection, RedisError> {
        let mut conn = RoutedConnection::new(self.cluster_connection()?, Arc::clone(self));
        self.note_nodes(&mut conn);
        Ok(conn)
    }

    /// A cluster connection with a fresh slot map, found through the
    /// seeds or, if none of them answers, through the nodes seen last.
    pub(super) fn cluster_connection(&self) -> std::result::Result<ClusterConnection, RedisError> {
        let conn = match self.client.get_connection() {
            Ok(conn) => conn,
            Err(err) => {
                let fallback = self.lock_discovered().as_ref().map(|d| d.client.clone());
                match fallback {
                    Some(client) => client.get_connection().map_err(|_| err)?,
                    None => return Err(err),
                }
            }
        };
        conn.set_read_timeout(Some(self.response_timeout))?;
        conn.set_write_timeout(Some(self.response_timeout))?;
        Ok(conn)
    }

    /// How long one call may take to answer.
    pub(super) fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// Reads the slot map through `conn` and keeps its nodes (masters and
    /// replicas) as the fallback seeds. Best effort: a failure keeps the
    /// previous ones, and the connection is usable either way.
    fn note_nodes(&self, conn: &mut RoutedConnection) {
        let Ok(reply) = redis::cmd("CLUSTER").arg("SLOTS").query::<Value>(conn) else {
            return;
        };
        let seed_host = self
            .seeds
            .first()
            .map_or_else(String::new, |seed| match seed.addr() {
                ConnectionAddr::Tcp(host, _) => host.clone(),
                other => other.to_string(),
            });
        let nodes = parse_nodes(&reply, &seed_host);
        if nodes.is_empty() {
            return;
        }
        let mut discovered = self.lock_discovered();
        if discovered.as_ref().is_some_and(|d| d.nodes == nodes) {
            return;
        }
        let infos: Vec<ConnectionInfo> = nodes
            .iter()
            .map(|(host, port)| self.node_info(host, *port))
            .collect();
        if let Ok(client) = client_for(
            infos,
            self.connection_timeout,
            self.response_timeout,
            self.certificates(),
        ) {
            *discovered = Some(Discovered { nodes, client });
        }
    }

    /// The connection settings of a discovered node: the first seed's
    /// (credentials, timeouts) at the node's address.
    fn node_info(&self, host: &str, port: u16) -> ConnectionInfo {
        let addr = match self.template.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        self.template.clone().set_addr(addr)
    }

    /// The routed connections' TLS certificates, if any were given.
    fn certificates(&self) -> Option<&Certificates> {
        #[cfg(feature = "tls")]
        return self
            .tls
            .as_ref()
            .and_then(|(_, certificates)| certificates.as_ref());
        #[cfg(not(feature = "tls"))]
        None
    }

    fn lock_discovered(&self) -> std::sync::MutexGuard<'_, Option<Discovered>> {
        // The data is a cache that is replaced whole: a panic elsewhere
        // cannot leave it half-written.
        self.discovered.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The masters and their slot ranges, from the first seed that answers
    /// `CLUSTER SLOTS`.
    fn slot_map(&self, address: &str) -> Result<Vec<SlotRange>> {
        let mut last = None;
        let discovered: Vec<ConnectionInfo> = self
            .lock_discovered()
            .as_ref()
            .map(|d| {
                d.nodes
                    .iter()
                    .map(|(host, port)| self.node_info(host, *port))
                    .collect()
            })
            .unwrap_or_default();
        for seed in self.seeds.iter().chain(&discovered) {
            match self.slot_map_from(seed) {
                Ok(map) if !map.is_empty() => return Ok(map),
                Ok(_) => last = Some("a node serves no slots (cluster not ready?)".to_owned()),
                Err(err) => last = Some(err.to_string()),
            }
        }
        Err(Error::backend(
            format!(
                "reading the slot map of Redis {address}: no seed answered ({})",
                last.unwrap_or_default()
            ),
            true,
        ))
    }

    fn slot_map_from(
        &self,
        seed: &ConnectionInfo,
    ) -> std::result::Result<Vec<SlotRange>, RedisError> {
        #[cfg(feature = "tls")]
        let client = match &self.tls {
            Some((_, Some(certificates))) => {
                redis::Client::build_with_tls(seed.clone(), certificates.clone())?
            }
            _ => redis::Client::open(seed.clone())?,
        };
        #[cfg(not(feature = "tls"))]
        let client = redis::Client::open(seed.clone())?;
        let mut conn = super::connect::connect_within(&client, self.connection_timeout)?;
        conn.set_read_timeout(Some(self.response_timeout))?;
        conn.set_write_timeout(Some(self.response_timeout))?;
        let reply: Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn)?;
        let seed_host = match seed.addr() {
            ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.clone(),
            other => other.to_string(),
        };
        Ok(parse_slots(&reply, &seed_host))
    }

    fn credentials(&self) -> (Option<String>, Option<String>) {
        self.seeds.first().map_or((None, None), |info| {
            let settings = info.redis_settings();
            (
                settings.username().map(str::to_owned),
                settings.password().map(str::to_owned),
            )
        })
    }
}

/// Nodes seen in a slot map, and a cluster client seeded with them.
struct Discovered {
    nodes: Vec<(String, u16)>,
    client: ClusterClient,
}

/// A cluster client for `nodes` with the given timeouts, and none of the
/// `redis` crate's own retries: they would send a script again after it
/// may have run (see `cluster_routing`, which retries what is safe).
/// With `certificates` (feature `tls`, `rediss://` nodes), every node's
/// connection trusts and presents them.
fn client_for(
    nodes: Vec<ConnectionInfo>,
    connection_timeout: Duration,
    response_timeout: Duration,
    certificates: Option<&Certificates>,
) -> std::result::Result<ClusterClient, RedisError> {
    let builder = ClusterClient::builder(nodes)
        .connection_timeout(connection_timeout)
        .response_timeout(response_timeout)
        .retries(0);
    #[cfg(feature = "tls")]
    let builder = match certificates {
        Some(certificates) => builder.certs(certificates.clone()),
        None => builder,
    };
    #[cfg(not(feature = "tls"))]
    let _ = certificates;
    builder.build()
}

/// The TLS certificates of the routed connections (feature `tls`); none
/// can exist without it.
#[cfg(feature = "tls")]
type Certificates = redis::TlsCertificates;
#[cfg(not(feature = "tls"))]
type Certificates = std::convert::Infallible;

/// Slots `start..=end` served by the master at `node` (`host:port`).
#[derive(Debug, Clone)]
struct SlotRange {
    start: u16,
    end: u16,
    node: String,
}

/// Reads a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, ...],
/// replicas...], ...]`. An empty host means the node's own (the seed's).
fn parse_slots(reply: &Value, seed_host: &str) -> Vec<SlotRange> {
    let mut ranges = Vec::new();
    let Value::Array(items) = reply else {
        return ranges;
    };
    for item in items {
        let Value::Array(fields) = item else { continue };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let Some((host, port)) = node_entry(master, seed_host) else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u16::try_from(*start), u16::try_from(*end)) else {
            continue;
        };
        let node = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        ranges.push(SlotRange { start, end, node });
    }
    ranges
}

/// Every node (masters and replicas) a `CLUSTER SLOTS` reply names, once
/// each, as host and port.
fn parse_nodes(reply: &Value, seed_host: &str) -> Vec<(String, u16)> {
    let mut nodes: Vec<(String, u16)> = Vec::new();
    let Value::Array(items) = reply else {
        return nodes;
    };
    for item in items {
        let Value::Array(fields) = item else { continue };
        for field in fields.iter().skip(2) {
            let Value::Array(entry) = field else { continue };
            if let Some(node) = node_entry(entry, seed_host)
                && !nodes.contains(&node)
            {
                nodes.push(node);
            }
        }
    }
    nodes
}

/// The host and port of one node entry of a `CLUSTER SLOTS` range
/// (`[host, port, id, ...]`); an empty or unknown host is the seed's.
fn node_entry(entry: &[Value], seed_host: &str) -> Option<(String, u16)> {
    let host = match entry.first()? {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        _ => return None,
    };
    let host = if host.is_empty() || host == "?" {
        seed_host.to_owned()
    } else {
        host
    };
    let Some(Value::Int(port)) = entry.get(1) else {
        return None;
    };
    Some((host, u16::try_from(*port).ok()?))
}

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the text
/// between the first `{` and the next `}`, if not empty) or of the whole
/// key, modulo 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            key[open + 1..]
                .iter()
                .position(|&b| b == b'}')
                .filter(|&len| len > 0)
                .map(|len| &key[open + 1..open + 1 + len])
        })
        .unwrap_or(key);
    crc16(tagged) % SLOTS
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// What a node's reader thread saw.
enum Event {
    Reply(String, Value),
    Closed(String, String),
}

/// One master's pub/sub connection.
struct Node {
    writer: Writer,
    reader: Option<JoinHandle<()>>,
}

/// The writing half of a pub/sub connection. Over plain TCP, a clone of
/// the socket the reader thread reads. Over TLS, the session state shared
/// with the reader thread (see [`tls_io`]).
enum Writer {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(tls_io::TlsWriter),
}

impl Writer {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Writer::Plain(stream) => stream.write_all(bytes),
            #[cfg(feature = "tls")]
            Writer::Tls(writer) => writer.write_all(bytes),
        }
    }

    /// Unblocks the reader thread, which then ends.
    // Without the `tls` feature the match has one arm.
    #[allow(clippy::infallible_destructuring_match)]
    fn shutdown(&self) {
        let socket = match self {
            Writer::Plain(stream) => stream,
            #[cfg(feature = "tls")]
            Writer::Tls(writer) => writer.socket(),
        };
        let _ = socket.shutdown(std::net::Shutdown::Both);
    }
}

/// The sharded subscriptions of one subscriber session; see the module doc.
pub(super) struct ClusterPubSub {
    target: Arc<ClusterTarget>,
    address: String,
    slots: Vec<SlotRange>,
    nodes: HashMap<String, Node>,
    sender: Sender<Event>,
    events: Receiver<Event>,
    /// Messages read while waiting for a confirmation.
    pending: VecDeque<Message>,
    /// Channel → the node it is subscribed on.
    channels: HashMap<String, String>,
    awaiting_subscribe: HashSet<String>,
    awaiting_unsubscribe: HashSet<String>,
}

impl std::fmt::Debug for ClusterPubSub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterPubSub")
            .field("address", &self.address)
            .field("nodes", &self.nodes.len())
            .field("channels", &self.channels.len())
            .finish_non_exhaustive()
    }
}

impl ClusterPubSub {
    /// Reads the slot map; connects to masters as channels need them.
    pub(super) fn new(target: &Arc<ClusterTarget>, address: &str) -> Result<Self> {
        let slots = target.slot_map(address)?;
        let (sender, events) = crossbeam_channel::unbounded();
        Ok(ClusterPubSub {
            target: Arc::clone(target),
            address: address.to_owned(),
            slots,
            nodes: HashMap::new(),
            sender,
            events,
            pending: VecDeque::new(),
            channels: HashMap::new(),
            awaiting_subscribe: HashSet::new(),
            awaiting_unsubscribe: HashSet::new(),
        })
    }

    fn error(&self, what: impl std::fmt::Display) -> Error {
        Error::backend(
            format!("pub/sub on Redis {}: {what}; reconnecting", self.address),
            true,
        )
    }

    fn owner(&self, channel: &str) -> Result<String> {
        let slot = slot(channel.as_bytes());
        self.slots
            .iter()
            .find(|range| range.start <= slot && slot <= range.end)
            .map(|range| range.node.clone())
            .ok_or_else(|| self.error(format_args!("no master serves slot {slot}")))
    }

    /// The writer to `node`, connecting (and logging in) first if needed.
    fn writer(&mut self, node: &str) -> Result<&mut Writer> {
        if !self.nodes.contains_key(node) {
            let connected = self.connect(node)?;
            self.nodes.insert(node.to_owned(), connected);
        }
        self.nodes
            .get_mut(node)
            .map(|node| &mut node.writer)
            .ok_or_else(|| Error::protocol("pub/sub node vanished"))
    }

    fn connect(&self, node: &str) -> Result<Node> {
        let target = &self.target;
        let io = |err: std::io::Error| self.error(format_args!("connecting to {node}: {err}"));
        let addr = node
            .to_socket_addrs()
            .map_err(io)?
            .next()
            .ok_or_else(|| self.error(format_args!("{node} resolves to no address")))?;
        let stream = TcpStream::connect_timeout(&addr, target.connection_timeout).map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        stream
            .set_write_timeout(Some(target.response_timeout))
            .map_err(io)?;
        // The handshake and AUTH wait at most the response timeout; then
        // the reader blocks until a reply or the socket's shutdown (Drop).
        stream
            .set_read_timeout(Some(target.response_timeout))
            .map_err(io)?;
        #[cfg(feature = "tls")]
        if let Some((config, _)) = &target.tls {
            let mut session = self.handshake(node, config, &stream)?;
            self.authenticate(node, &mut rustls::Stream::new(&mut session, &mut &stream))?;
            stream.set_read_timeout(None).map_err(io)?;
            let (reader, writer) = tls_io::split(session, stream).map_err(io)?;
            return Ok(Node {
                writer: Writer::Tls(writer),
                reader: Some(self.spawn_reader(node, reader)?),
            });
        }
        self.authenticate(node, &mut &stream)?;
        stream.set_read_timeout(None).map_err(io)?;
        let reader = BufReader::new(stream.try_clone().map_err(io)?);
        Ok(Node {
            writer: Writer::Plain(stream),
            reader: Some(self.spawn_reader(node, reader)?),
        })
    }

    /// Logs in on a fresh connection, if the seeds carry credentials.
    fn authenticate<S: Read + Write>(&self, node: &str, stream: &mut S) -> Result<()> {
        let (username, password) = self.target.credentials();
        let Some(password) = password else {
            return Ok(());
        };
        let mut auth = redis::cmd("AUTH");
        if let Some(username) = username {
            auth.arg(username);
        }
        auth.arg(password);
        stream
            .write_all(&auth.get_packed_command())
            .and_then(|()| stream.flush())
            .map_err(|err| self.error(format_args!("connecting to {node}: {err}")))?;
        let reply = Parser::new()
            .parse_value(&mut *stream)
            .map_err(|err| self.error(format_args!("AUTH on {node}: {err}")))?;
        if let Value::ServerError(err) = reply {
            return Err(Error::backend(
                format!(
                    "pub/sub on Redis {}: authentication failed on {node}: {}",
                    self.address,
                    err.code()
                ),
                false,
            ));
        }
        Ok(())
    }

    /// A TLS session with `node`, its certificate verified against the
    /// node's host (an IP address or a DNS name).
    #[cfg(feature = "tls")]
    fn handshake(
        &self,
        node: &str,
        config: &Arc<rustls::ClientConfig>,
        stream: &TcpStream,
    ) -> Result<rustls::ClientConnection> {
        let host = node
            .rsplit_once(':')
            .map_or(node, |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .map_err(|err| self.error(format_args!("TLS server name of {node}: {err}")))?;
        let mut session = rustls::ClientConnection::new(Arc::clone(config), name)
            .map_err(|err| self.error(format_args!("TLS with {node}: {err}")))?;
        while session.is_handshaking() {
            session
                .complete_io(&mut &*stream)
                .map_err(|err| self.error(format_args!("TLS handshake with {node}: {err}")))?;
        }
        Ok(session)
    }

    fn spawn_reader<R: Read + Send + 'static>(
        &self,
        node: &str,
        reader: R,
    ) -> Result<JoinHandle<()>> {
        let sender = self.sender.clone();
        let name = node.to_owned();
        std::thread::Builder::new()
            .name("redisync-cluster-pubsub".to_owned())
            .spawn(move || read_replies(name, reader, sender))
            .map_err(|err| self.error(format_args!("starting a reader for {node}: {err}")))
    }

    fn send(&mut self, node: &str, command: &redis::Cmd) -> Result<()> {
        let packed = command.get_packed_command();
        let result = self.writer(node)?.write_all(&packed);
        result.map_err(|err| self.error(format_args!("writing to {node}: {err}")))
    }

    /// Handles one event; returns a message to deliver, if it was one.
    fn handle(&mut self, event: Event) -> Result<Option<Message>> {
        let (node, value) = match event {
            Event::Reply(node, value) => (node, value),
            Event::Closed(node, err) => {
                return Err(self.error(format_args!("connection to {node} lost: {err}")));
            }
        };
        let items = match value {
            Value::Array(items) => items,
            Value::Push { kind, data } => {
                let mut items = vec![Value::SimpleString(kind.to_string())];
                items.extend(data);
                items
            }
            Value::ServerError(err) => {
                // MOVED (the slot map changed), or a refusal.
                return Err(self.error(format_args!("{node} answered {err:?}")));
            }
            other => {
                return Err(self.error(format_args!("{node} sent unexpected {other:?}")));
            }
        };
        let text = |value: Option<&Value>| match value {
            Some(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
            Some(Value::SimpleString(text)) => Some(text.clone()),
            _ => None,
        };
        let kind = text(items.first()).unwrap_or_default().to_ascii_lowercase();
        let channel = text(items.get(1)).unwrap_or_default();
        match kind.as_str() {
            "smessage" | "message" => {
                let payload = text(items.get(2)).unwrap_or_default();
                Ok(Some(Message::new(&channel, payload)))
            }
            "ssubscribe" => {
                self.awaiting_subscribe.remove(&channel);
                self.channels.insert(channel, node);
                Ok(None)
            }
            "sunsubscribe" if self.awaiting_unsubscribe.remove(&channel) => {
                self.channels.remove(&channel);
                Ok(None)
            }
            "sunsubscribe" => Err(self.error(format_args!(
                "{node} dropped the subscription to {channel:?} (its slot moved)"
            ))),
            _ => Err(self.error(format_args!("{node} sent unexpected {kind:?}"))),
        }
    }

    /// Handles events until nothing is awaited any more.
    fn await_confirmations(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.target.response_timeout;
        while !self.awaiting_subscribe.is_empty() || !self.awaiting_unsubscribe.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = self
                .events
                .recv_timeout(left)
                .map_err(|_| self.error("no confirmation within the response timeout"))?;
            if let Some(message) = self.handle(event)? {
                self.pending.push_back(message);
            }
        }
        Ok(())
    }
}

/// A reader thread: parses replies from `reader` until it closes (or the
/// session ends and drops the receiver).
fn read_replies(node: String, mut reader: impl Read, sender: Sender<Event>) {
    let mut parser = Parser::new();
    loop {
        match parser.parse_value(&mut reader) {
            Ok(value) => {
                if sender.send(Event::Reply(node.clone(), value)).is_err() {
                    return;
                }
            }
            Err(err) => {
                let _ = sender.send(Event::Closed(node, err.to_string()));
                return;
            }
        }
    }
}

impl Drop for ClusterPubSub {
    fn drop(&mut self) {
        for node in self.nodes.values_mut() {
            node.writer.shutdown();
            if let Some(reader) = node.reader.take() {
                let _ = reader.join();
            }
        }
    }
}

impl PubSubConnection for ClusterPubSub {
    fn subscribe(&mut self, channels: &[String]) -> Result<()> {
        for channel in channels {
            let node = self.owner(channel)?;
            // One command per channel: a sharded subscription names
            // channels of one slot only.
            self.send(&node, redis::cmd("SSUBSCRIBE").arg(channel))?;
            self.awaiting_subscribe.insert(channel.clone());
        }
        self.await_confirmations()
    }

    fn unsubscribe(&mut self, channels: &[String]) -> Result<()> {
        for channel in channels {
            let Some(node) = self.channels.get(channel).cloned() else {
                continue;
            };
            self.send(&node, redis::cmd("SUNSUBSCRIBE").arg(channel))?;
            self.awaiting_unsubscribe.insert(channel.clone());
        }
        self.await_confirmations()
    }

    fn next_message(&mut self, timeout: Duration) -> Result<Option<Message>> {
        if let Some(message) = self.pending.pop_front() {
            return Ok(Some(message));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = match self.events.recv_timeout(left) {
                Ok(event) => event,
                Err(_) => return Ok(None),
            };
            if let Some(message) = self.handle(event)? {
                return Ok(Some(message));
            }
        }
    }
}

/// A TLS pub/sub connection split into a reading half (the reader thread's)
/// and a writing half (the session's), without a read timeout and without
/// a thread between the writer and the socket.
///
/// A rustls session is a state machine that does no I/O itself, so the two
/// halves share it behind a mutex and each does its own socket I/O on its
/// own clone of the TCP socket: the reader blocks in `read` on the raw
/// socket *without* the lock, then takes it to decrypt what arrived (and to
/// send anything the session must answer, such as a key update); the writer
/// takes it to encrypt a command and send the records. Records go out in
/// the session's order because only the lock holder writes to the socket.
/// A command therefore leaves at once, even while the reader waits, exactly
/// as on a plain connection.
#[cfg(feature = "tls")]
mod tls_io {
    use std::io::{self, Read, Write};
    use std::net::TcpStream;
    use std::sync::Arc;

    use parking_lot::Mutex;
    use rustls::ClientConnection;

    /// The reader thread's half: decrypted bytes, for the RESP parser.
    pub(super) struct TlsReader {
        session: Arc<Mutex<ClientConnection>>,
        socket: TcpStream,
        /// Ciphertext just read from the socket.
        received: Vec<u8>,
        /// Decrypted bytes not yet handed out, from `start`.
        plaintext: Vec<u8>,
        start: usize,
        /// The server closed the connection (cleanly or not).
        closed: bool,
    }

    /// The session's half: encrypts and sends commands.
    pub(super) struct TlsWriter {
        session: Arc<Mutex<ClientConnection>>,
        socket: TcpStream,
    }

    /// Splits a session whose handshake is complete.
    pub(super) fn split(
        session: ClientConnection,
        socket: TcpStream,
    ) -> io::Result<(TlsReader, TlsWriter)> {
        let session = Arc::new(Mutex::new(session));
        let reader = TlsReader {
            session: Arc::clone(&session),
            socket: socket.try_clone()?,
            received: vec![0; 16 * 1024],
            plaintext: Vec::new(),
            start: 0,
            closed: false,
        };
        Ok((reader, TlsWriter { session, socket }))
    }

    /// Sends every TLS record the session has ready. The caller holds the
    /// session's lock.
    fn flush(session: &mut ClientConnection, mut socket: &TcpStream) -> io::Result<()> {
        while session.wants_write() {
            if session.write_tls(&mut socket)? == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
        }
        Ok(())
    }

    impl TlsWriter {
        pub(super) fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
            let mut session = self.session.lock();
            session.writer().write_all(bytes)?;
            flush(&mut session, &self.socket)
        }

        pub(super) fn socket(&self) -> &TcpStream {
            &self.socket
        }
    }

    impl TlsReader {
        /// Moves the session's decrypted bytes to `plaintext`; notes a
        /// close_notify.
        fn take_plaintext(&mut self, session: &mut ClientConnection) -> io::Result<()> {
            match session.reader().read_to_end(&mut self.plaintext) {
                Ok(_) => {
                    self.closed = true;
                    Ok(())
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(()),
                Err(err) => Err(err),
            }
        }

        /// Waits for decrypted bytes (or the end of the connection).
        fn fill(&mut self) -> io::Result<()> {
            self.plaintext.clear();
            self.start = 0;
            {
                // Bytes decrypted before the split (none are expected).
                let session = Arc::clone(&self.session);
                self.take_plaintext(&mut session.lock())?;
            }
            while self.plaintext.is_empty() && !self.closed {
                // Blocks without the lock, so the writer is never held up.
                let count = match self.socket.read(&mut self.received) {
                    Ok(0) => {
                        self.closed = true;
                        return Ok(());
                    }
                    Ok(count) => count,
                    Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                    Err(err) => return Err(err),
                };
                let session = Arc::clone(&self.session);
                let mut session = session.lock();
                let mut fed = 0;
                while fed < count {
                    match session.read_tls(&mut &self.received[fed..count])? {
                        0 => return Err(io::Error::other("the TLS session took no bytes")),
                        taken => fed += taken,
                    }
                    let processed = session.process_new_packets();
                    // Sends the alert of a failure too, then reports it.
                    flush(&mut session, &self.socket)?;
                    processed.map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
                    self.take_plaintext(&mut session)?;
                }
            }
            Ok(())
        }
    }

    impl Read for TlsReader {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.start == self.plaintext.len() {
                if self.closed {
                    return Ok(0);
                }
                self.fill()?;
            }
            let available = &self.plaintext[self.start..];
            let count = available.len().min(out.len());
            out[..count].copy_from_slice(&available[..count]);
            self.start += count;
            Ok(count)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_cluster_spec() {
        // The examples of the Redis Cluster specification and redis-cli.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
        assert_eq!(slot(b"redisson_lock__channel:{orders}"), slot(b"orders"));
    }

    #[test]
    fn slot_map_reply_is_read() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                node("", 7001),
                node("10.0.0.2", 7004),
            ]),
        ]);
        let ranges = parse_slots(&reply, "127.0.0.1");
        assert_eq!(ranges.len(), 2);
        assert_eq!(ranges[0].node, "10.0.0.1:7000");
        assert_eq!((ranges[1].start, ranges[1].end), (5461, 16383));
        assert_eq!(ranges[1].node, "127.0.0.1:7001");
    }

    fn seeds_error(urls: &[&str], options: &RedisOptions) -> Error {
        let urls: Vec<String> = urls.iter().map(|url| (*url).to_owned()).collect();
        match ClusterTarget::new(&urls, options) {
            Ok(_) => panic!("{urls:?} accepted"),
            Err(err) => err,
        }
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn rediss_seed_needs_the_tls_feature() {
        let err = seeds_error(
            &["redis://127.0.0.1:7000", "rediss://:pw-xyz@127.0.0.1:7001"],
            &RedisOptions::default(),
        );
        assert!(err.is_invalid_argument(), "{err}");
        let shown = format!("{err} {err:?}");
        assert!(shown.contains("`tls` feature"), "{shown}");
        assert!(shown.contains("cluster_urls"), "{shown}");
        assert!(!shown.contains("pw-xyz"), "{shown}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_seeds_are_checked() {
        let plain = RedisOptions::default();
        let mixed = seeds_error(
            &[
                "rediss://:pw-xyz@127.0.0.1:7000",
                "redis://:pw-xyz@127.0.0.1:7001",
            ],
            &plain,
        );
        assert!(mixed.is_invalid_argument(), "{mixed}");
        let shown = format!("{mixed} {mixed:?}");
        assert!(shown.contains("URL #2 is redis://"), "{shown}");
        assert!(!shown.contains("pw-xyz"), "{shown}");

        let insecure = seeds_error(&["rediss://127.0.0.1:7000/#insecure"], &plain);
        assert!(insecure.is_invalid_argument(), "{insecure}");
        assert!(insecure.to_string().contains("#insecure"), "{insecure}");

        let with_ca = RedisOptions::default().tls_root_certificate(b"whatever".to_vec());
        let not_tls = seeds_error(&["redis://127.0.0.1:7000"], &with_ca);
        assert!(not_tls.to_string().contains("not rediss://"), "{not_tls}");
        let bad_ca = seeds_error(&["rediss://127.0.0.1:7000"], &with_ca);
        assert!(
            bad_ca.to_string().contains("tls_root_certificate"),
            "{bad_ca}"
        );
    }
}
