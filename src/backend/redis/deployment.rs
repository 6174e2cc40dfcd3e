//! [`Deployment`]: which Redis deployment a client talks to, said one way.

use std::fmt;

use super::{RedisBackend, RedisOptions};
use crate::Result;

/// Which Redis deployment a client talks to: one server, the master of a
/// Sentinel-monitored group (feature `sentinel`), or a Redis Cluster
/// (feature `cluster`). Given to
/// [`ClientBuilder::deployment`](crate::ClientBuilder::deployment) or
/// [`RedisBackend::connect`]; [`Client::open`](crate::Client::open) and
/// [`ClientBuilder::redis_url`](crate::ClientBuilder::redis_url) are the
/// one-line forms of [`Deployment::single`].
///
/// `Debug` shows the kind only: the URLs may hold passwords.
///
/// ```no_run
/// use redisync::Deployment;
/// let client = redisync::Client::builder()
///     .deployment(Deployment::single("redis://127.0.0.1:6379/"))
///     .build()?;
/// # Ok::<(), redisync::Error>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum Deployment {
    /// One server: `redis://[user:password@]host:port/db` (or `rediss://`
    /// with the `tls` feature).
    Single {
        /// The server's URL.
        url: String,
    },
    /// The current master of a Sentinel-monitored group, followed across
    /// failovers.
    #[cfg(feature = "sentinel")]
    Sentinel(super::SentinelConfig),
    /// A Redis Cluster, found through any of these nodes.
    #[cfg(feature = "cluster")]
    Cluster {
        /// Seed nodes' URLs; one reachable node is enough.
        node_urls: Vec<String>,
    },
}

impl Deployment {
    /// One server at `url`.
    ///
    /// ```
    /// let deployment = redisync::Deployment::single("redis://127.0.0.1:6379/");
    /// assert_eq!(format!("{deployment:?}"), "Deployment::Single");
    /// ```
    pub fn single(url: impl Into<String>) -> Self {
        Deployment::Single { url: url.into() }
    }

    /// The master `master_name` of a group watched by the sentinels at
    /// `sentinel_urls` (use [`SentinelConfig`](super::SentinelConfig) and
    /// [`Deployment::Sentinel`] for the master's password or database).
    ///
    /// ```
    /// # #[cfg(feature = "sentinel")] {
    /// let deployment = redisync::Deployment::sentinel("mymaster", ["redis://10.0.0.5:26379"]);
    /// assert!(format!("{deployment:?}").starts_with("Deployment::Sentinel"));
    /// # }
    /// ```
    #[cfg(feature = "sentinel")]
    pub fn sentinel<I>(master_name: impl Into<String>, sentinel_urls: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Deployment::Sentinel(super::SentinelConfig::new(master_name, sentinel_urls))
    }

    /// The cluster whose nodes include `node_urls`.
    ///
    /// ```
    /// # #[cfg(feature = "cluster")] {
    /// let deployment = redisync::Deployment::cluster(["redis://10.0.0.5:7000"]);
    /// assert_eq!(format!("{deployment:?}"), "Deployment::Cluster { seeds: 1 }");
    /// # }
    /// ```
    #[cfg(feature = "cluster")]
    pub fn cluster<I>(node_urls: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Deployment::Cluster {
            node_urls: node_urls
                .into_iter()
                .map(|url| url.as_ref().to_owned())
                .collect(),
        }
    }
}

impl fmt::Debug for Deployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Deployment::Single { .. } => f.write_str("Deployment::Single"),
            #[cfg(feature = "sentinel")]
            Deployment::Sentinel(config) => write!(f, "Deployment::Sentinel({config:?})"),
            #[cfg(feature = "cluster")]
            Deployment::Cluster { node_urls } => {
                write!(f, "Deployment::Cluster {{ seeds: {} }}", node_urls.len())
            }
        }
    }
}

impl RedisBackend {
    /// Connects to `deployment` with `options`: the one constructor the
    /// others (`open`, `open_with`, `open_sentinel*`, `open_cluster*`)
    /// are shorthands of.
    ///
    /// ```no_run
    /// use redisync::{Deployment, RedisOptions};
    /// let backend = redisync::RedisBackend::connect(
    ///     &Deployment::single("redis://127.0.0.1:6379/"),
    ///     RedisOptions::default(),
    /// )?;
    /// # Ok::<(), redisync::Error>(())
    /// ```
    ///
    /// # Errors
    /// As the matching `open_*` constructor: bad options or URLs
    /// (`InvalidArgument`), or the deployment cannot be reached.
    pub fn connect(deployment: &Deployment, options: RedisOptions) -> Result<Self> {
        match deployment {
            Deployment::Single { url } => RedisBackend::open_with(url, options),
            #[cfg(feature = "sentinel")]
            Deployment::Sentinel(config) => RedisBackend::open_sentinel_with(config, options),
            #[cfg(feature = "cluster")]
            Deployment::Cluster { node_urls } => {
                RedisBackend::open_cluster_with(node_urls, options)
            }
        }
    }
}
