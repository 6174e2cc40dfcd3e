//! Redis Cluster (feature `cluster`), a part of the Redis backend: routed
//! scripts and sharded pub/sub.
//!
//! Commands go through the `redis` crate's blocking cluster connection (one
//! per pooled connection), wrapped by [`RoutedConnection`] (see
//! `routing`): it sends each script to the master of its first
//! key's slot (every key of a primitive shares that slot, see `keys.rs`)
//! and never twice after it may have run. The crate's connection keeps its
//! slot map until it is told otherwise, so after a master is killed it
//! would go on asking the dead address: a cluster connection that failed
//! with anything but a server reply is discarded by the pool
//! (`Target::discards_after` in `backend/redis/pool.rs`), and its replacement reads the
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
//!
//! | module | job | uses |
//! |---|---|---|
//! | `slots` | a key's hash slot (CRC16 of its hash tag); reading a `CLUSTER SLOTS` reply | nothing |
//! | `discovery` | the seeds, the slot map (read with `CLUSTER SLOTS`), the nodes seen last; fresh routed connections | `routing`, `slots` |
//! | `routing` | each script to its slot's master, at most once, its window in that node's clock | `slots`, a [`SlotMapSource`] |
//! | `pubsub` | sharded pub/sub on every master | `discovery` (the slot map), `slots` |

mod discovery;
mod pubsub;
mod routing;
mod slots;

pub(super) use self::discovery::ClusterTarget;
pub(super) use self::pubsub::ClusterPubSub;
pub(super) use self::routing::{NODE_WINDOW, RoutedConnection};
pub(super) use self::slots::slot;
