//! Sharded pub/sub on a cluster: one connection per master, a reader thread
//! each, subscriptions made on the master that owns each channel's slot.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use redis::{Parser, Value};

use super::discovery::ClusterTarget;
use super::slots::{SlotRange, slot};
use crate::backend::{Message, PubSubConnection};
use crate::{Error, Result};

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
pub(crate) struct ClusterPubSub {
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
    pub(crate) fn new(target: &Arc<ClusterTarget>, address: &str) -> Result<Self> {
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

    /// Logs in on a fresh connection, if the seeds carry credentials,
    /// and names it (`CLIENT SETNAME`, see `naming`: a refusal is reported
    /// once and costs only the name).
    fn authenticate<S: Read + Write>(&self, node: &str, stream: &mut S) -> Result<()> {
        self.log_in(node, stream)?;
        let Some(name) = &self.target.connection_name else {
            return Ok(());
        };
        stream
            .write_all(&name.command().get_packed_command())
            .and_then(|()| stream.flush())
            .map_err(|err| self.error(format_args!("connecting to {node}: {err}")))?;
        let reply = Parser::new()
            .parse_value(&mut *stream)
            .map_err(|err| self.error(format_args!("CLIENT SETNAME on {node}: {err}")))?;
        name.check_reply(reply, node)
            .map_err(|err| self.error(format_args!("CLIENT SETNAME on {node}: {err}")))
    }

    /// Logs in on a fresh connection, if the seeds carry credentials.
    fn log_in<S: Read + Write>(&self, node: &str, stream: &mut S) -> Result<()> {
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
