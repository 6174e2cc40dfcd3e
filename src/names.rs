//! The client's key namespace: a prefix put before every object name before
//! its keys and channels are derived (Redisson's `NameMapper` that prefixes,
//! set with [`ClientBuilder::name_prefix`](crate::ClientBuilder::name_prefix)).
//!
//! Redisson maps a name once, in `RedissonObject`'s constructor, and derives
//! every key and channel from the mapped ("raw") name; `getName()` unmaps
//! it. So does redisync: `client.lock("orders")` with prefix `app1:` lives
//! at key `app1:orders` with channel `redisson_lock__channel:{app1:orders}`,
//! exactly where a Redisson client whose name mapper prefixes `app1:` puts
//! it, and the handle's `name()` is `orders`.
//!
//! Only a prefix is offered (not an arbitrary mapping): unmapping is then a
//! slice of the key, and the one rule that keeps every key of an object in
//! one cluster slot can be checked when the client is built (see
//! [`check_prefix`]).

use crate::{Error, Result};

/// A client's name prefix (empty: none).
#[derive(Debug, Clone, Default)]
pub(crate) struct Names {
    prefix: String,
}

impl Names {
    /// A namespace with `prefix`, checked by [`check_prefix`].
    pub(crate) fn new(prefix: String) -> Result<Names> {
        check_prefix(&prefix)?;
        Ok(Names { prefix })
    }

    /// The prefix (empty: none).
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The store's name for object `name`: `<prefix><name>`. An empty name
    /// stays empty, so that the operations refuse it as they would without
    /// a prefix (rather than acting on the key `<prefix>`).
    pub(crate) fn map(&self, name: String) -> String {
        if self.prefix.is_empty() || name.is_empty() {
            name
        } else {
            let mut key = String::with_capacity(self.prefix.len() + name.len());
            key.push_str(&self.prefix);
            key.push_str(&name);
            key
        }
    }

    /// The object name of store name `key`: `key` without the prefix (or
    /// `key` itself when it does not start with it).
    pub(crate) fn unmap<'a>(&self, key: &'a str) -> &'a str {
        key.strip_prefix(self.prefix.as_str()).unwrap_or(key)
    }
}

/// Checks an object name (the handles check theirs before each call).
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("name", "a name must not be empty"));
    }
    Ok(())
}

/// A prefix must not contain `{` or `}`: every auxiliary key and channel
/// wraps the mapped name in a `{...}` hash tag unless the name already has a
/// `{` (then the name's own tag decides the slot), and a brace in the prefix
/// would move some of them to another slot than the object's own key (a
/// latch's channel `redisson_countdownlatch__channel__{<mapped>}` always adds
/// braces: with prefix `{a}:` its tag would be `{a`), which breaks every
/// script on a Redis Cluster.
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    if let Some(brace) = prefix.chars().find(|c| *c == '{' || *c == '}') {
        return Err(Error::invalid(
            "name_prefix",
            format!(
                "must not contain '{brace}', got {prefix:?}: a brace in the prefix would \
                 change the Redis Cluster hash tag of some of an object's keys and channels \
                 but not of others (put a hash tag in the object name instead)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_maps_and_unmaps() {
        let names = Names::new("app1:".to_owned()).unwrap();
        assert_eq!(names.map("orders".to_owned()), "app1:orders");
        assert_eq!(names.unmap("app1:orders"), "orders");
        assert_eq!(names.unmap("other"), "other");
        assert_eq!(names.map(String::new()), "", "an empty name stays refused");
        let none = Names::default();
        assert_eq!(none.map("orders".to_owned()), "orders");
        assert_eq!(none.unmap("orders"), "orders");
    }

    #[test]
    fn braces_are_refused_with_the_reason() {
        for prefix in ["{app}:", "app}", "a{"] {
            let err = Names::new(prefix.to_owned()).unwrap_err();
            assert!(err.is_invalid_argument(), "{err}");
            let text = err.to_string();
            assert!(
                text.contains("name_prefix") && text.contains("hash tag"),
                "{text}"
            );
            assert!(text.contains(&format!("{prefix:?}")), "{text}");
        }
        assert!(Names::new(String::new()).is_ok());
        assert!(Names::new("app1:".to_owned()).is_ok());
    }
}
