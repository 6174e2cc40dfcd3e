//! The cluster's seeds and topology: checking the seed URLs, reading the
//! slot map, remembering the nodes seen last (the fallback when no seed
//! answers), and opening routed connections with a fresh slot map.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterConnection};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError, Value};

use super::routing::{RoutedConnection, SlotMapSource};
use super::slots::{SlotRange, parse_nodes, parse_slots};
use crate::backend::RedisOptions;
use crate::{Error, Result};

/// The seeds of a cluster and a client for its routed connections.
pub(crate) struct ClusterTarget {
    pub(super) client: ClusterClient,
    pub(super) seeds: Vec<ConnectionInfo>,
    /// The nodes the last routed connection saw in the slot map, and a
    /// client seeded with them: the fallback when no seed answers any more
    /// (the seeds were replaced, or the only one died).
    pub(super) discovered: Mutex<Option<Discovered>>,
    /// The first seed's settings, for the discovered nodes.
    pub(super) template: ConnectionInfo,
    pub(super) connection_timeout: Duration,
    pub(super) response_timeout: Duration,
    pub(super) description: String,
    /// The name of every connection (`CLIENT SETNAME`), see `naming`.
    pub(super) connection_name: Option<Arc<crate::backend::redis::naming::ConnectionName>>,
    /// With `rediss://` seeds: the rustls configuration of our own pub/sub
    /// sockets, and the certificates (if any were set) of the plain
    /// `redis::Client` that reads the slot map.
    #[cfg(feature = "tls")]
    pub(super) tls: Option<(Arc<rustls::ClientConfig>, Option<redis::TlsCertificates>)>,
}

impl ClusterTarget {
    /// Checks the seed URLs (`redis://[user:password@]host:port`, or all
    /// of them `rediss://` with the `tls` feature) and builds the client;
    /// connects to nothing yet.
    pub(crate) fn new(urls: &[String], options: &RedisOptions) -> Result<Arc<Self>> {
        let mut seeds = Vec::with_capacity(urls.len());
        let mut first_is_tls = None;
        for (index, url) in urls.iter().enumerate() {
            crate::backend::redis::tls::require_tls_feature("cluster_urls", url)?;
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
            let provider = crate::backend::redis::tls::crypto_provider();
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
            connection_name: options.connection_name.clone(),
            #[cfg(feature = "tls")]
            tls,
        }))
    }

    /// The seeds' addresses, for messages (no credentials).
    pub(crate) fn description(&self) -> &str {
        &self.description
    }

    /// A routed connection (to every node it needs, made as needed).
    /// Each new one notes the nodes of the slot map it read, for when no
    /// seed answers any more.
    pub(crate) fn connect(self: &Arc<Self>) -> std::result::Result<RoutedConnection, RedisError> {
        let mut conn = RoutedConnection::new(
            self.cluster_connection()?,
            Arc::clone(self) as Arc<dyn SlotMapSource>,
        );
        self.note_nodes(&mut conn);
        Ok(conn)
    }

    /// A cluster connection with a fresh slot map, found through the
    /// seeds or, if none of them answers, through the nodes seen last.
    ///
    /// Under a caller's deadline (a call opening a connection itself, or a
    /// MOVED reply's refresh), the connect and the slot-map read keep to
    /// what is left of it: the clients are then made with those timeouts.
    pub(crate) fn cluster_connection(&self) -> std::result::Result<ClusterConnection, RedisError> {
        let connect = crate::deadline::cap(self.connection_timeout);
        let respond = crate::deadline::cap(self.response_timeout);
        let capped = connect < self.connection_timeout || respond < self.response_timeout;
        let seeds = if capped {
            client_for(self.seeds.clone(), connect, respond, self.certificates())?
        } else {
            self.client.clone()
        };
        let mut conn = match seeds.get_connection() {
            Ok(conn) => conn,
            Err(err) => {
                let fallback = match self.lock_discovered().as_ref() {
                    Some(d) if capped => {
                        let nodes = d
                            .nodes
                            .iter()
                            .map(|(host, port)| self.node_info(host, *port))
                            .collect();
                        client_for(nodes, connect, respond, self.certificates()).ok()
                    }
                    Some(d) => Some(d.client.clone()),
                    None => None,
                };
                if crate::deadline::passed() {
                    return Err(err);
                }
                match fallback {
                    Some(client) => client.get_connection().map_err(|_| err)?,
                    None => return Err(err),
                }
            }
        };
        // Naming keeps to the caller's deadline when a call opens the
        // connection itself.
        let naming = crate::deadline::cap(self.response_timeout);
        conn.set_read_timeout(Some(naming))?;
        conn.set_write_timeout(Some(naming))?;
        self.name_nodes(&mut conn);
        conn.set_read_timeout(Some(self.response_timeout))?;
        conn.set_write_timeout(Some(self.response_timeout))?;
        Ok(conn)
    }

    /// Names the node connections `conn` opened (every node of its slot
    /// map, masters and replicas) with `CLIENT SETNAME`, routed to every
    /// node. Best effort: a refusal is reported once (see `naming`), and a
    /// node that cannot be reached now keeps its connection unnamed (the
    /// connection is usable either way; a script to that node fails on its
    /// own).
    fn name_nodes(&self, conn: &mut ClusterConnection) {
        use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
        let Some(name) = &self.connection_name else {
            return;
        };
        let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllNodes, None));
        if let Err(err) = conn.route_command(&name.command(), routing) {
            // An I/O error is no refusal: ignored (see above).
            let _ = name.check_error(err, &self.description);
        }
    }

    /// Names a connection of ours to one node (the slot map's, the
    /// sharded pub/sub's goes through `pubsub`), if a name is set.
    pub(super) fn name_connection(
        &self,
        conn: &mut redis::Connection,
        address: &str,
    ) -> std::result::Result<(), RedisError> {
        match &self.connection_name {
            Some(name) => name.apply(conn, address),
            None => Ok(()),
        }
    }

    /// The first seed's host: a slot map's empty host is the answering
    /// node's own.
    pub(crate) fn seed_host(&self) -> String {
        match self.template.addr() {
            ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.clone(),
            other => other.to_string(),
        }
    }

    /// How long one call may take to answer.
    pub(crate) fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// Reads the slot map through `conn`, gives it to `conn` (its scripts
    /// go to the masters it names) and keeps its nodes (masters and
    /// replicas) as the fallback seeds. Best effort: a failure keeps the
    /// previous ones, and the connection is usable either way (it reads
    /// the slot map again when a script needs it).
    pub(super) fn note_nodes(&self, conn: &mut RoutedConnection) {
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
        conn.set_slot_map(&reply, &seed_host);
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
    pub(super) fn node_info(&self, host: &str, port: u16) -> ConnectionInfo {
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
    pub(super) fn certificates(&self) -> Option<&Certificates> {
        #[cfg(feature = "tls")]
        return self
            .tls
            .as_ref()
            .and_then(|(_, certificates)| certificates.as_ref());
        #[cfg(not(feature = "tls"))]
        None
    }

    pub(super) fn lock_discovered(&self) -> std::sync::MutexGuard<'_, Option<Discovered>> {
        // The data is a cache that is replaced whole: a panic elsewhere
        // cannot leave it half-written.
        self.discovered.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The masters and their slot ranges, from the first seed that answers
    /// `CLUSTER SLOTS`.
    pub(super) fn slot_map(&self, address: &str) -> Result<Vec<SlotRange>> {
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

    pub(super) fn slot_map_from(
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
        let mut conn =
            crate::backend::redis::connect::connect_within(&client, self.connection_timeout)?;
        conn.set_read_timeout(Some(self.response_timeout))?;
        conn.set_write_timeout(Some(self.response_timeout))?;
        self.name_connection(&mut conn, &seed.addr().to_string())?;
        let reply: Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn)?;
        let seed_host = match seed.addr() {
            ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.clone(),
            other => other.to_string(),
        };
        Ok(parse_slots(&reply, &seed_host))
    }

    pub(super) fn credentials(&self) -> (Option<String>, Option<String>) {
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
pub(super) struct Discovered {
    pub(super) nodes: Vec<(String, u16)>,
    pub(super) client: ClusterClient,
}

/// A cluster client for `nodes` with the given timeouts, and none of the
/// `redis` crate's own retries: they would send a script again after it
/// may have run (see `cluster_routing`, which retries what is safe).
/// With `certificates` (feature `tls`, `rediss://` nodes), every node's
/// connection trusts and presents them.
pub(super) fn client_for(
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
pub(super) type Certificates = redis::TlsCertificates;
#[cfg(not(feature = "tls"))]
pub(super) type Certificates = std::convert::Infallible;

impl SlotMapSource for ClusterTarget {
    fn cluster_connection(&self) -> std::result::Result<ClusterConnection, RedisError> {
        ClusterTarget::cluster_connection(self)
    }

    fn response_timeout(&self) -> Duration {
        ClusterTarget::response_timeout(self)
    }

    fn connection_timeout(&self) -> Duration {
        self.connection_timeout
    }

    fn seed_host(&self) -> String {
        ClusterTarget::seed_host(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn seeds_error(urls: &[&str], options: &RedisOptions) -> Error {
        let urls: Vec<String> = urls.iter().map(|url| (*url).to_owned()).collect();
        match ClusterTarget::new(&urls, options) {
            Ok(_) => panic!("{urls:?} accepted"),
            Err(err) => err,
        }
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    pub(super) fn rediss_seed_needs_the_tls_feature() {
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
    pub(super) fn tls_seeds_are_checked() {
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
