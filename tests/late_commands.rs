//! Issue 21: nothing late can break a hold. Requests that reach Redis after
//! their caller gave up (held by a delaying proxy, or queued behind a frozen
//! server) change nothing, and the undo of a failed acquire removes exactly
//! that attempt's hold.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::TestServer;
use common::delay_proxy::DelayProxy;

/// The proxy itself: a held request runs only when delivered, also after
/// its client closed the connection, and the proxy says how much it held.
#[test]
fn delay_proxy_holds_and_delivers_after_the_client_closed() {
    let server = TestServer::start();
    let proxy = DelayProxy::start(server.port());
    let mut direct = server.connection();
    proxy.hold_next(b"late-key");
    let mut sock = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
    let request = b"*3\r\n$3\r\nSET\r\n$8\r\nlate-key\r\n$1\r\nv\r\n";
    sock.write_all(request).unwrap();
    let held = proxy.wait_held(Duration::from_secs(5));
    assert_eq!(held, request.len());
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 16];
    assert!(sock.read(&mut buf).is_err(), "a held request got a reply");
    let exists: bool = redis::cmd("EXISTS")
        .arg("late-key")
        .query(&mut direct)
        .unwrap();
    assert!(!exists, "the held SET ran before it was delivered");
    drop(sock);
    common::wait_until(
        "the proxy sees the client gone",
        Duration::from_secs(5),
        || proxy.held_client_closed(),
    );
    assert_eq!(proxy.deliver(), request.len());
    let value: Option<String> = redis::cmd("GET")
        .arg("late-key")
        .query(&mut direct)
        .unwrap();
    assert_eq!(value.as_deref(), Some("v"));
    assert_eq!(proxy.held_bytes(), 0);
    assert_eq!(proxy.connections(), 1);
}
