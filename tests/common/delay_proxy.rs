//! A loopback TCP proxy that can hold one connection's client-to-server
//! bytes and deliver them later: a request that reaches Redis after its
//! caller gave up on it, as a network delivers after a partition (a closed
//! socket's unsent data is still retransmitted by the kernel, and a
//! middlebox may have taken it already).
//!
//! ```ignore
//! let proxy = DelayProxy::start(server.port());
//! let client = redisync::Client::open(proxy.url())?;   // every byte goes through it
//! proxy.hold_next(b"my-lock");       // the next chunk naming the lock is held...
//! assert!(lock.try_lock_for(Duration::from_millis(100)).is_err()); // ...so this times out
//! let n = proxy.wait_held(Duration::from_secs(5));   // confirm something was held
//! // ... the client retries, gives up, closes the connection ...
//! let delivered = proxy.deliver();   // now Redis runs it; waits for its reply
//! assert_eq!(delivered, n);
//! ```
//!
//! Semantics:
//! - `hold_next(pattern)` arms the proxy once: the first client-to-server
//!   chunk (one `read`) of any connection that contains `pattern` is held,
//!   and so is every later chunk of that same connection, until `deliver`.
//!   Other connections (a retry's fresh one) pass through untouched.
//! - The held connection's upstream socket stays open even after the client
//!   closed its side (abortively or not), so `deliver` still reaches Redis.
//!   Once delivered and the client gone, the upstream side is shut down.
//! - Server-to-client bytes always pass (to a closed client they are dropped),
//!   at once, or `delay` later on connections accepted after
//!   `delay_replies(delay)` (a slow reader: a pub/sub message heard late).
//! - Bounded: loopback only, every socket has a short read timeout, and all
//!   threads stop on drop or after [`MAX_LIFETIME`] at the latest.
//!
//! Test code: failures panic with a descriptive message.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The proxy stops itself this long after `start`, dropped or not.
pub const MAX_LIFETIME: Duration = Duration::from_secs(300);
/// How often a blocked socket read wakes to look at the stop flag.
const POLL: Duration = Duration::from_millis(20);
/// How long `deliver` waits for the server's reply to what it delivered.
const REPLY_WAIT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct State {
    /// `Some(pattern)` while armed by `hold_next`.
    armed: Option<Vec<u8>>,
    /// Further patterns the held chunk must contain as well (armed by
    /// `hold_next_request`); empty for `hold_next`.
    armed_also: Vec<Vec<u8>>,
    /// When the first bytes of the held connection were held.
    held_at: Option<Instant>,
    /// Connections the server closed while the last bytes that passed on
    /// them were a request from their client, unanswered (see
    /// `server_closes_with_a_request_unanswered`).
    server_closed_awaiting: u64,
    /// The id of the held connection, once one matched.
    held_conn: Option<u64>,
    /// The bytes held so far (in arrival order).
    held: Vec<u8>,
    /// Its upstream socket (a clone), to write the held bytes through.
    held_upstream: Option<TcpStream>,
    /// Whether the held connection's client side has gone away.
    held_client_closed: bool,
    /// Whether it went away with a reset (an abortive close: `SO_LINGER`
    /// 0), not an orderly FIN.
    held_client_reset: bool,
    /// Server-to-client bytes seen on the held connection (to confirm a reply).
    held_replied: u64,
    /// What the server answered on the held connection since its bytes
    /// were delivered (to read the reply to the late request).
    held_reply: Vec<u8>,
    /// Whether the connection armed by `hold_next_and_cut` has its client
    /// side shut as soon as it is held (the client sees the connection
    /// drop while its request is still on the way).
    cut: bool,
    /// A copy of the last bytes delivered, and the reply they got.
    last_delivered: Vec<u8>,
    /// Seconds added to every `TIME` reply passing through (see
    /// `shift_time_replies`).
    time_shift: i64,
    /// Connections accepted so far.
    accepted: u64,
    /// How late server-to-client bytes reach the client, on connections
    /// accepted from now on (see `delay_replies`).
    reply_delay: Duration,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    stop: AtomicBool,
    started: Instant,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.started.elapsed() >= MAX_LIFETIME
    }
}

/// A delaying TCP proxy in front of one loopback server port. See the module
/// documentation.
pub struct DelayProxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl DelayProxy {
    /// Listens on a free loopback port and forwards every connection to
    /// `127.0.0.1:upstream_port`.
    pub fn start(upstream_port: u16) -> DelayProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .unwrap_or_else(|e| panic!("DelayProxy: cannot bind 127.0.0.1:0: {e}"));
        let port = listener
            .local_addr()
            .expect("DelayProxy: local_addr")
            .port();
        listener
            .set_nonblocking(true)
            .expect("DelayProxy: set_nonblocking");
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            started: Instant::now(),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name("delay-proxy-accept".into())
                .spawn(move || accept_loop(&listener, upstream_port, &shared))
                .expect("DelayProxy: spawn")
        };
        DelayProxy {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// Every server-to-client byte of connections accepted from now on
    /// reaches its client `delay` after the proxy read it, in order (a
    /// client that hears replies and pub/sub messages late; its requests
    /// still pass at once).
    pub fn delay_replies(&self, delay: Duration) {
        self.shared.state.lock().unwrap().reply_delay = delay;
    }

    /// The proxy's own port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`: a URL that goes through the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Arms the proxy: the next client-to-server chunk containing `pattern`
    /// (on any connection) and every later chunk of that connection are held
    /// until [`deliver`](Self::deliver). Panics if a connection is already
    /// held (one at a time).
    pub fn hold_next(&self, pattern: &[u8]) {
        let mut st = self.shared.state.lock().unwrap();
        assert!(
            st.held_conn.is_none(),
            "DelayProxy: a connection is already held; deliver it first"
        );
        st.armed = Some(pattern.to_vec());
        st.armed_also.clear();
        st.cut = false;
    }

    /// As [`hold_next`](Self::hold_next), but the held chunk must contain
    /// every one of `patterns` (e.g. `EVAL` and the object's name: a
    /// script call on it, not a `SUBSCRIBE` to its channel, which names it
    /// too). Panics if `patterns` is empty.
    pub fn hold_next_request(&self, patterns: &[&[u8]]) {
        let (first, rest) = patterns
            .split_first()
            .expect("DelayProxy: hold_next_request needs a pattern");
        self.hold_next(first);
        self.shared.state.lock().unwrap().armed_also = rest.iter().map(|p| p.to_vec()).collect();
    }

    /// As [`hold_next_request`](Self::hold_next_request), and the held
    /// connection's client side is shut at once (see
    /// [`hold_next_and_cut`](Self::hold_next_and_cut)).
    pub fn hold_next_request_and_cut(&self, patterns: &[&[u8]]) {
        self.hold_next_request(patterns);
        self.shared.state.lock().unwrap().cut = true;
    }

    /// Disarms a `hold_next*` that has not held anything yet (no-op once a
    /// connection is held: `deliver` it). Returns whether it was armed.
    pub fn disarm(&self) -> bool {
        let mut st = self.shared.state.lock().unwrap();
        if st.held_conn.is_some() {
            return false;
        }
        st.armed_also.clear();
        st.cut = false;
        st.armed.take().is_some()
    }

    /// When the bytes held now were first held (`None`: nothing held).
    pub fn held_at(&self) -> Option<Instant> {
        self.shared.state.lock().unwrap().held_at
    }

    /// How many connections so far the server closed (not their client)
    /// while the last bytes that passed on them were a request of their
    /// client with no reply since: a request in flight when, e.g., a
    /// `CLIENT KILL` closed its connection.
    pub fn server_closes_with_a_request_unanswered(&self) -> u64 {
        self.shared.state.lock().unwrap().server_closed_awaiting
    }

    /// As [`hold_next`](Self::hold_next), and the held connection's client
    /// side is shut at once: the client sees its connection drop with the
    /// request unanswered, and may send it again on another connection,
    /// while the proxy (a middlebox) still holds the original for
    /// [`deliver`](Self::deliver).
    pub fn hold_next_and_cut(&self, pattern: &[u8]) {
        self.hold_next(pattern);
        self.shared.state.lock().unwrap().cut = true;
    }

    /// From now on, every reply to `TIME` that passes through (an array of
    /// two bulk strings, ten digits of seconds first) reads `seconds` more:
    /// the server's clock as its clients see it, stepped (negative: back).
    /// For a server whose own clock libfaketime cannot step (Redis links
    /// jemalloc, which libfaketime cannot be preloaded beside).
    pub fn shift_time_replies(&self, seconds: i64) {
        self.shared.state.lock().unwrap().time_shift = seconds;
    }

    /// A copy of the bytes held right now (to check what request it is).
    pub fn held_request(&self) -> Vec<u8> {
        self.shared.state.lock().unwrap().held.clone()
    }

    /// What the last [`deliver`](Self::deliver) sent, and the server's
    /// reply to it (as far as it had come when `deliver` returned: at least
    /// one byte), both as lossy text.
    pub fn last_delivery(&self) -> (String, String) {
        let st = self.shared.state.lock().unwrap();
        (
            String::from_utf8_lossy(&st.last_delivered).into_owned(),
            String::from_utf8_lossy(&st.held_reply).into_owned(),
        )
    }

    /// Bytes held right now.
    pub fn held_bytes(&self) -> usize {
        self.shared.state.lock().unwrap().held.len()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.state.lock().unwrap().accepted
    }

    /// Whether the held connection's client already closed its side.
    pub fn held_client_closed(&self) -> bool {
        self.shared.state.lock().unwrap().held_client_closed
    }

    /// Whether the held connection's client closed it abortively (a TCP
    /// reset, as `SO_LINGER` 0 makes a close), rather than with a FIN.
    pub fn held_client_reset(&self) -> bool {
        self.shared.state.lock().unwrap().held_client_reset
    }

    /// Waits (at most `timeout`) until some bytes are held and returns how
    /// many. Panics if nothing was held in time: the fault did not happen.
    pub fn wait_held(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.state.lock().unwrap();
        while st.held.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "DelayProxy: nothing was held within {timeout:?}"
            );
            st = self.shared.changed.wait_timeout(st, left).unwrap().0;
        }
        st.held.len()
    }

    /// As [`wait_held`](Self::wait_held), but `None` (and the proxy
    /// disarmed) instead of a panic if nothing was held in time.
    pub fn try_wait_held(&self, timeout: Duration) -> Option<usize> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.state.lock().unwrap();
        while st.held.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                if st.held_conn.is_none() {
                    st.armed = None;
                    st.armed_also.clear();
                    st.cut = false;
                    return None;
                }
                // Matched just now: it is held.
                break;
            }
            st = self.shared.changed.wait_timeout(st, left).unwrap().0;
        }
        Some(st.held.len())
    }

    /// Writes every held byte to the server (also after the client closed
    /// its side), waits until the server replied to it, and returns how many
    /// bytes were delivered. The connection then passes through like any
    /// other (or is shut down, if its client is gone). Panics if nothing is
    /// held or no reply comes within 10 s.
    pub fn deliver(&self) -> usize {
        let mut st = self.shared.state.lock().unwrap();
        assert!(!st.held.is_empty(), "DelayProxy: nothing is held");
        let bytes = std::mem::take(&mut st.held);
        let mut upstream = st
            .held_upstream
            .take()
            .expect("DelayProxy: the held connection has an upstream socket");
        let replied_before = st.held_replied;
        st.held_reply.clear();
        st.last_delivered = bytes.clone();
        upstream
            .write_all(&bytes)
            .unwrap_or_else(|e| panic!("DelayProxy: delivering {} bytes: {e}", bytes.len()));
        st.armed = None;
        let deadline = Instant::now() + REPLY_WAIT;
        // A whole reply: RESP's first line ends with CRLF (a bulk reply's
        // body follows it, which the caller reads as far as it came).
        while st.held_replied == replied_before || !contains(&st.held_reply, b"\r\n") {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "DelayProxy: no reply to the {} delivered bytes within {REPLY_WAIT:?}",
                bytes.len()
            );
            st = self.shared.changed.wait_timeout(st, left).unwrap().0;
        }
        if st.held_client_closed {
            let _ = upstream.shutdown(Shutdown::Write);
        }
        st.held_conn = None;
        st.held_at = None;
        st.held_client_closed = false;
        st.held_client_reset = false;
        st.cut = false;
        bytes.len()
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.acceptor.take() {
            let _ = handle.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, upstream_port: u16, shared: &Arc<Shared>) {
    let mut pumps = Vec::new();
    let mut next_id = 0u64;
    while !shared.stopping() {
        match listener.accept() {
            Ok((client, _)) => {
                let Ok(upstream) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
                    continue; // the client sees its connection closed
                };
                next_id += 1;
                shared.state.lock().unwrap().accepted += 1;
                pumps.extend(spawn_pumps(next_id, client, upstream, shared));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(POLL),
            Err(_) => thread::sleep(POLL),
        }
    }
    for pump in pumps {
        let _ = pump.join();
    }
}

fn spawn_pumps(
    id: u64,
    client: TcpStream,
    upstream: TcpStream,
    shared: &Arc<Shared>,
) -> Vec<JoinHandle<()>> {
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let _ = client.set_read_timeout(Some(POLL));
    let _ = upstream.set_read_timeout(Some(POLL));
    let (Ok(client2), Ok(upstream2)) = (client.try_clone(), upstream.try_clone()) else {
        return Vec::new();
    };
    // Whether the last bytes that passed were a request (client to
    // server) with no reply since, and whether the client has gone.
    let flags = Arc::new((AtomicBool::new(false), AtomicBool::new(false)));
    let up = {
        let (shared, flags) = (Arc::clone(shared), Arc::clone(&flags));
        thread::spawn(move || client_to_server(id, client, upstream, &shared, (&flags.0, &flags.1)))
    };
    let delay = shared.state.lock().unwrap().reply_delay;
    // A delayed connection's bytes go through a writer thread that holds
    // each chunk until it is due (the reader never blocks on it).
    let (client2, writer) = if delay.is_zero() {
        (Writer::Direct(client2), None)
    } else {
        let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
        let handle = thread::spawn(move || delayed_writer(client2, &rx));
        (Writer::Delayed(tx, delay), Some(handle))
    };
    let down = {
        let shared = Arc::clone(shared);
        thread::spawn(move || {
            server_to_client(id, upstream2, client2, &shared, (&flags.0, &flags.1));
        })
    };
    let mut pumps = vec![up, down];
    pumps.extend(writer);
    pumps
}

fn client_to_server(
    id: u64,
    mut client: TcpStream,
    mut upstream: TcpStream,
    shared: &Shared,
    (awaiting, client_gone): (&AtomicBool, &AtomicBool),
) {
    let mut buf = [0u8; 16 * 1024];
    let mut reset = false;
    while !shared.stopping() {
        let n = match client.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) => {
                reset = e.kind() == ErrorKind::ConnectionReset;
                break;
            }
        };
        let chunk = &buf[..n];
        let mut st = shared.state.lock().unwrap();
        let matches_armed = st.armed.as_deref().is_some_and(|p| contains(chunk, p))
            && st.armed_also.iter().all(|p| contains(chunk, p));
        if st.held_conn.is_none() && matches_armed {
            st.armed = None;
            st.armed_also.clear();
            st.held_conn = Some(id);
            st.held_upstream = upstream.try_clone().ok();
            st.held_at = Some(Instant::now());
        }
        if st.held_conn == Some(id) && st.held_upstream.is_some() {
            st.held.extend_from_slice(chunk);
            if st.cut {
                // The client's side drops; the request stays held here.
                let _ = client.shutdown(Shutdown::Both);
            }
            shared.changed.notify_all();
            continue;
        }
        drop(st);
        awaiting.store(true, Ordering::SeqCst);
        if upstream.write_all(chunk).is_err() {
            break;
        }
    }
    client_gone.store(true, Ordering::SeqCst);
    // The client is gone. A held connection keeps its upstream open for
    // `deliver`, which shuts it down; any other is shut down now.
    let mut st = shared.state.lock().unwrap();
    if st.held_conn == Some(id) {
        st.held_client_closed = true;
        st.held_client_reset = reset;
        shared.changed.notify_all();
    } else {
        drop(st);
        let _ = upstream.shutdown(Shutdown::Write);
    }
}

/// Where a connection's server-to-client bytes go: straight to the client,
/// or to its delayed writer with the delay.
enum Writer {
    Direct(TcpStream),
    Delayed(std::sync::mpsc::Sender<(Instant, Vec<u8>)>, Duration),
}

impl Writer {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Writer::Direct(client) => client.write_all(bytes),
            Writer::Delayed(tx, delay) => tx
                .send((Instant::now() + *delay, bytes.to_vec()))
                .map_err(|_| std::io::Error::from(ErrorKind::BrokenPipe)),
        }
    }

    fn shutdown(&self) {
        // A delayed writer shuts the client down once the queue is drained
        // (its sender dropped with this).
        if let Writer::Direct(client) = self {
            let _ = client.shutdown(Shutdown::Both);
        }
    }
}

/// Writes each chunk to `client` once it is due; shuts `client` down when
/// the reader is gone and everything was written.
fn delayed_writer(mut client: TcpStream, rx: &std::sync::mpsc::Receiver<(Instant, Vec<u8>)>) {
    while let Ok((due, bytes)) = rx.recv() {
        thread::sleep(due.saturating_duration_since(Instant::now()));
        if client.write_all(&bytes).is_err() {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
}

fn server_to_client(
    id: u64,
    mut upstream: TcpStream,
    mut client: Writer,
    shared: &Shared,
    (awaiting, client_gone): (&AtomicBool, &AtomicBool),
) {
    let mut buf = [0u8; 16 * 1024];
    let mut client_open = true;
    while !shared.stopping() {
        let n = match upstream.read(&mut buf) {
            Ok(0) => {
                server_closed(id, shared, awaiting, client_gone);
                break;
            }
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => {
                server_closed(id, shared, awaiting, client_gone);
                break;
            }
        };
        awaiting.store(false, Ordering::SeqCst);
        let shift = shared.state.lock().unwrap().time_shift;
        if shift != 0 {
            shift_time_reply(&mut buf[..n], shift);
        }
        {
            let mut st = shared.state.lock().unwrap();
            if st.held_conn == Some(id) {
                st.held_replied += n as u64;
                st.held_reply.extend_from_slice(&buf[..n]);
                shared.changed.notify_all();
            }
        }
        if client_open && client.write_all(&buf[..n]).is_err() {
            client_open = false; // keep reading so the server is never blocked
        }
    }
    client.shutdown();
}

/// The server closed connection `id`: counted when its client was still
/// there and a request of it had passed with no reply since (a held
/// connection's bytes never passed, so it is not counted).
fn server_closed(id: u64, shared: &Shared, awaiting: &AtomicBool, client_gone: &AtomicBool) {
    if awaiting.load(Ordering::SeqCst) && !client_gone.load(Ordering::SeqCst) {
        let mut st = shared.state.lock().unwrap();
        if st.held_conn != Some(id) {
            st.server_closed_awaiting += 1;
            shared.changed.notify_all();
        }
    }
}

/// Adds `shift` seconds to a `TIME` reply in `chunk`, in place (the width
/// of its ten digits kept).
fn shift_time_reply(chunk: &mut [u8], shift: i64) {
    const HEAD: &[u8] = b"*2\r\n$10\r\n";
    let Some(at) = chunk.windows(HEAD.len()).position(|w| w == HEAD) else {
        return;
    };
    let digits = at + HEAD.len()..at + HEAD.len() + 10;
    let Some(text) = chunk.get(digits.clone()) else {
        return;
    };
    let Some(seconds) = std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse::<i64>().ok())
    else {
        return;
    };
    let shifted = format!("{:010}", seconds + shift);
    if shifted.len() == 10 {
        chunk[digits].copy_from_slice(shifted.as_bytes());
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}
