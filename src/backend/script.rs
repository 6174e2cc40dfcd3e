//! What crosses the store seam: a [`Script`] (one of `lua/`), a
//! [`ScriptCall`] (the script with its KEYS and ARGV, and what the store may
//! do about faults and replicas) and its [`Reply`].
//!
//! The operations themselves (which script, which keys, how to read the
//! reply) live in [`crate::ops`], one module per primitive; a store only
//! runs what it is given.

use std::borrow::Cow;
use std::sync::OnceLock;

use crate::Error;

/// One Lua script of `lua/`, as the operations define it: a stable id (the
/// file's stem), the operation it performs in words (for error messages)
/// and its code, argument checks included.
///
/// A store runs [`code`](Self::code), or on a Redis Cluster
/// [`sharded_code`](Self::sharded_code), whose messages go through sharded
/// pub/sub (`SPUBLISH`, as Redisson does on Redis 7+ clusters).
///
/// ```
/// let script = redisync::Script::new("greet", "greeting", "return 'hi'");
/// assert_eq!(script.id(), "greet");
/// assert_eq!(script.operation(), "greeting");
/// assert_eq!(script.sharded_code(), "return 'hi'");
/// ```
#[derive(Debug)]
pub struct Script {
    id: &'static str,
    operation: &'static str,
    code: &'static str,
    windowed: bool,
    sharded: OnceLock<String>,
}

/// The window check that every writing script starts with
/// (`lua/window_prelude.lua`): see [`Script::is_windowed`].
pub(crate) const WINDOW_PRELUDE: &str = include_str!("../../lua/window_prelude.lua");

/// Added to a round trip's own timeout to make its window (see
/// [`Script::is_windowed`]): the error of the client's estimate of the
/// server's clock (half a round trip when it was read) and the time
/// between reading the local clock and sending. How long past its round
/// trip's timeout a request may still land: a wait for a request that
/// timed out covers it too.
///
/// ```
/// assert_eq!(redisync::WINDOW_MARGIN.as_millis(), 25);
/// ```
pub const WINDOW_MARGIN: std::time::Duration = std::time::Duration::from_millis(25);

/// A request's window, in ms: its read timeout plus [`WINDOW_MARGIN`].
fn window_ms(timeout: std::time::Duration) -> i64 {
    i64::try_from(timeout.saturating_add(WINDOW_MARGIN).as_millis()).unwrap_or(i64::MAX / 4)
}

/// The end of the window of a request sent now with a read timeout of
/// `timeout`, in ms by the server's clock, whose offset to this process's
/// monotonic clock is `offset_ms` (see `clock::server_offset`): a step of
/// the local wall clock moves no window.
pub(crate) fn window_end(offset_ms: i64, timeout: std::time::Duration) -> i64 {
    let window = window_ms(timeout);
    crate::clock::server_now(offset_ms).saturating_add(window)
}

/// The end of the window of a request sent now that waits up to `timeout`
/// for its reply: `server_now_ms` (the server's clock now, in ms since the
/// epoch, as the store estimates it) plus `timeout` plus
/// [`WINDOW_MARGIN`]. A store passes it to [`ScriptCall::window_arg`] for
/// each try of a call (each try has its own timeout), so that a copy of
/// the request that reaches the server after the caller gave up on it
/// writes nothing (see [`LockBackend`](crate::LockBackend), *Windows*).
///
/// Estimate `server_now_ms` on a monotonic clock (a reading of the
/// server's `TIME` plus the monotonic time since), not by reading this
/// machine's wall clock at each call: a step of the wall clock would move
/// every window with it.
///
/// ```
/// use std::time::Duration;
/// let end = redisync::request_window_end(1_700_000_000_000, Duration::from_secs(1));
/// assert_eq!(end, 1_700_000_001_025);
/// ```
pub fn request_window_end(server_now_ms: i64, timeout: std::time::Duration) -> i64 {
    server_now_ms.saturating_add(window_ms(timeout))
}

/// `code` starts with `prefix` (a `const` form of `str::starts_with`).
const fn starts_with(code: &str, prefix: &str) -> bool {
    let (code, prefix) = (code.as_bytes(), prefix.as_bytes());
    if code.len() < prefix.len() {
        return false;
    }
    let mut i = 0;
    while i < prefix.len() {
        if code[i] != prefix[i] {
            return false;
        }
        i += 1;
    }
    true
}

impl Script {
    /// A script; `const`, so operations define theirs as `static`s.
    ///
    /// ```
    /// static PING: redisync::Script =
    ///     redisync::Script::new("ping", "ping", "return 1");
    /// assert_eq!(PING.code(), "return 1");
    /// ```
    pub const fn new(id: &'static str, operation: &'static str, code: &'static str) -> Self {
        Script {
            id,
            operation,
            code,
            windowed: starts_with(code, WINDOW_PRELUDE),
            sharded: OnceLock::new(),
        }
    }

    /// Whether it refuses itself when it arrives late: a script that
    /// writes starts with `lua/window_prelude.lua` and takes one more ARGV
    /// than its own, last: the end of the request's window in ms since the
    /// epoch by the server's clock (`0`: no window). A store appends it
    /// (see [`ScriptCall::window_arg`]); past it, the script writes nothing
    /// and replies `ERR late request: ...`, which the operations read as a
    /// failed round trip (a connection error: the caller retries, or gives
    /// up as after a timeout).
    ///
    /// ```
    /// let script = redisync::Script::new("a", "b", "return 1");
    /// assert!(!script.is_windowed());
    /// ```
    pub fn is_windowed(&self) -> bool {
        self.windowed
    }

    /// The id: the stem of its file in `lua/` (`lock_acquire`).
    ///
    /// ```
    /// assert_eq!(redisync::Script::new("a", "b", "").id(), "a");
    /// ```
    pub fn id(&self) -> &'static str {
        self.id
    }

    /// What it does, in words (`lock acquire`), for messages.
    ///
    /// ```
    /// assert_eq!(redisync::Script::new("a", "b", "").operation(), "b");
    /// ```
    pub fn operation(&self) -> &'static str {
        self.operation
    }

    /// The code for a single server (or Sentinel's master).
    ///
    /// ```
    /// assert_eq!(redisync::Script::new("a", "b", "return 1").code(), "return 1");
    /// ```
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The code for a Redis Cluster: every `redis.call('publish', ...)` is
    /// `spublish` (the two pub/sub namespaces do not see each other).
    ///
    /// ```
    /// let script = redisync::Script::new("a", "b", "redis.call('publish', KEYS[1], 0)");
    /// assert_eq!(script.sharded_code(), "redis.call('spublish', KEYS[1], 0)");
    /// ```
    pub fn sharded_code(&self) -> &str {
        self.sharded.get_or_init(|| {
            self.code
                .replace("redis.call('publish',", "redis.call('spublish',")
        })
    }
}

/// Whether a store may send a call again, on another connection, after the
/// connection it used failed.
///
/// ```
/// assert_ne!(redisync::Resend::Harmless, redisync::Resend::IfUnsent);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resend {
    /// Running it twice is harmless (a read, a renewal, a release behind
    /// its unlock latch, a lock acquisition whose phantom hold the
    /// outermost unlock drains): resend after a connection the server had
    /// closed.
    Harmless,
    /// It counts (permits, a latch count): resend only when the request
    /// provably never left (the write to the socket failed).
    IfUnsent,
}

/// What a call does to the store, for replica acknowledgement: a store that
/// waits for replicas (`WAIT`) after a write does so only when
/// [`changed`](Self::changed) says the reply reports a change.
///
/// ```
/// use redisync::{Effect, Reply};
/// assert!(!Effect::Read.changed(&Reply::Int(1)));
/// assert!(Effect::Change(|reply| reply.is_nil()).changed(&Reply::Nil));
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Effect {
    /// Changes nothing that must reach a replica.
    Read,
    /// May change state; the function says from the reply whether it did
    /// (a release that released, a renewal that renewed).
    Change(fn(&Reply) -> bool),
    /// An acquisition: the function says whether it acquired. When too few
    /// replicas confirm it and the policy is to fail, the store runs
    /// `undo` (built from this call and its reply) and tries again.
    Acquire {
        /// Whether the reply is an acquisition.
        acquired: fn(&Reply) -> bool,
        /// The call that gives the acquisition back.
        undo: fn(&ScriptCall<'_>, &Reply) -> ScriptCall<'static>,
    },
}

impl Effect {
    /// Whether `reply` reports a change that replicas must confirm.
    ///
    /// ```
    /// use redisync::{Effect, Reply};
    /// assert!(Effect::Change(|_| true).changed(&Reply::Nil));
    /// ```
    pub fn changed(&self, reply: &Reply) -> bool {
        match self {
            Effect::Read => false,
            Effect::Change(changed) => changed(reply),
            Effect::Acquire { acquired, .. } => acquired(reply),
        }
    }
}

/// One script to run: the [`Script`], its KEYS and ARGV, and what the store
/// may do about a fault ([`Resend`]) and about replicas ([`Effect`]).
///
/// ```
/// use redisync::{Effect, Resend, Script, ScriptCall};
/// static GET: Script = Script::new("get", "get", "return redis.call('get', KEYS[1])");
/// let call = ScriptCall::new(&GET, Resend::Harmless, Effect::Read).key("k").arg(7);
/// assert_eq!(call.keys(), ["k"]);
/// assert_eq!(call.args(), ["7"]);
/// ```
#[derive(Debug, Clone)]
pub struct ScriptCall<'a> {
    script: &'static Script,
    keys: Vec<Cow<'a, str>>,
    args: Vec<Cow<'a, str>>,
    resend: Resend,
    effect: Effect,
}

impl<'a> ScriptCall<'a> {
    /// A call of `script` with no keys or arguments yet.
    ///
    /// ```
    /// use redisync::{Effect, Resend, Script, ScriptCall};
    /// static ONE: Script = Script::new("one", "one", "return 1");
    /// assert!(ScriptCall::new(&ONE, Resend::Harmless, Effect::Read).keys().is_empty());
    /// ```
    pub fn new(script: &'static Script, resend: Resend, effect: Effect) -> Self {
        ScriptCall {
            script,
            // The lock's release: 6 keys, 10 arguments (no regrowth).
            keys: Vec::with_capacity(6),
            args: Vec::with_capacity(10),
            resend,
            effect,
        }
    }

    /// Adds a key (`KEYS[n]`); on a cluster the first key picks the node.
    ///
    /// ```
    /// use redisync::{Effect, Resend, Script, ScriptCall};
    /// static ONE: Script = Script::new("one", "one", "return 1");
    /// let call = ScriptCall::new(&ONE, Resend::Harmless, Effect::Read).key(String::from("a"));
    /// assert_eq!(call.keys(), ["a"]);
    /// ```
    #[must_use]
    pub fn key(mut self, key: impl Into<Cow<'a, str>>) -> Self {
        self.keys.push(key.into());
        self
    }

    /// Adds an argument (`ARGV[n]`), as Redis passes it: a string.
    ///
    /// ```
    /// use redisync::{Effect, Resend, Script, ScriptCall};
    /// static ONE: Script = Script::new("one", "one", "return 1");
    /// let call = ScriptCall::new(&ONE, Resend::Harmless, Effect::Read).arg(-3).arg("x");
    /// assert_eq!(call.args(), ["-3", "x"]);
    /// ```
    #[must_use]
    pub fn arg(mut self, arg: impl Arg<'a>) -> Self {
        self.args.push(arg.into_arg());
        self
    }

    /// The script.
    ///
    /// ```
    /// use redisync::{Effect, Resend, Script, ScriptCall};
    /// static ONE: Script = Script::new("one", "one", "return 1");
    /// assert_eq!(ScriptCall::new(&ONE, Resend::Harmless, Effect::Read).script().id(), "one");
    /// ```
    pub fn script(&self) -> &'static Script {
        self.script
    }

    /// KEYS, in order.
    ///
    /// ```
    /// use redisync::{Effect, Resend, Script, ScriptCall};
    /// static ONE: Script = Script::new("one", "one", "return 1");
    /// let call = ScriptCall::new(&ONE, Resend::Harmless, Effect::Read).key("a").key("b");
    /// assert_eq!(call.keys(), ["a", "b"]);
    /// ```
    pub fn keys(&self) -> &[Cow<'a, str>] {
        &self.keys
    }

    /// ARGV, in order.
    ///
    /// ```
    /// use redisync::{Effect, Resend, Script, ScriptCall};
    /// static ONE: Script = Script::new("one", "one", "return 1");
    /// assert_eq!(ScriptCall::new(&ONE, Resend::Harmless, Effect::Read).arg(1).args(), ["1"]);
    /// ```
    pub fn args(&self) -> &[Cow<'a, str>] {
        &self.args
    }

    /// The last ARGV a windowed script takes ([`Script::is_windowed`]):
    /// `window_end_ms` (ms since the epoch by the server's clock; `0`, or
    /// anything not positive, for no window), or `None` when the script
    /// takes none. A store appends it after [`args`](Self::args).
    ///
    /// ```
    /// use redisync::{Effect, Resend, Script, ScriptCall};
    /// static ONE: Script = Script::new("one", "one", "return 1");
    /// assert_eq!(ScriptCall::new(&ONE, Resend::Harmless, Effect::Read).window_arg(5), None);
    /// ```
    pub fn window_arg(&self, window_end_ms: i64) -> Option<String> {
        self.window_end(window_end_ms).map(|end| end.to_string())
    }

    /// [`window_arg`](Self::window_arg) as the number, for a store that
    /// writes it into its request without a string of its own.
    ///
    /// ```
    /// use redisync::{Effect, Resend, Script, ScriptCall};
    /// static ONE: Script = Script::new("one", "one", "return 1");
    /// assert_eq!(ScriptCall::new(&ONE, Resend::Harmless, Effect::Read).window_end(5), None);
    /// ```
    pub fn window_end(&self, window_end_ms: i64) -> Option<i64> {
        self.script.is_windowed().then(|| window_end_ms.max(0))
    }

    /// Whether it may be sent again after a connection fault.
    ///
    /// ```
    /// use redisync::{Effect, Resend, Script, ScriptCall};
    /// static ONE: Script = Script::new("one", "one", "return 1");
    /// let call = ScriptCall::new(&ONE, Resend::IfUnsent, Effect::Read);
    /// assert_eq!(call.resend(), Resend::IfUnsent);
    /// ```
    pub fn resend(&self) -> Resend {
        self.resend
    }

    /// What it does, for replica acknowledgement.
    ///
    /// ```
    /// use redisync::{Effect, Reply, Resend, Script, ScriptCall};
    /// static ONE: Script = Script::new("one", "one", "return 1");
    /// let call = ScriptCall::new(&ONE, Resend::Harmless, Effect::Read);
    /// assert!(!call.effect().changed(&Reply::Int(1)));
    /// ```
    pub fn effect(&self) -> Effect {
        self.effect
    }

    /// The same call with every key and argument owned.
    ///
    /// ```
    /// use redisync::{Effect, Resend, Script, ScriptCall};
    /// static ONE: Script = Script::new("one", "one", "return 1");
    /// let name = String::from("k");
    /// let owned = ScriptCall::new(&ONE, Resend::Harmless, Effect::Read).key(name.as_str()).into_owned();
    /// drop(name);
    /// assert_eq!(owned.keys(), ["k"]);
    /// ```
    pub fn into_owned(self) -> ScriptCall<'static> {
        let own = |items: Vec<Cow<'a, str>>| {
            items
                .into_iter()
                .map(|item| Cow::Owned(item.into_owned()))
                .collect()
        };
        ScriptCall {
            script: self.script,
            keys: own(self.keys),
            args: own(self.args),
            resend: self.resend,
            effect: self.effect,
        }
    }
}

/// A value that can be a script argument: text, or an integer (sent in
/// decimal, as Redis clients send numbers).
///
/// ```
/// use redisync::Arg;
/// assert_eq!(42_i64.into_arg(), "42");
/// assert_eq!("x".into_arg(), "x");
/// ```
pub trait Arg<'a> {
    /// The argument as Redis receives it.
    fn into_arg(self) -> Cow<'a, str>;
}

impl<'a> Arg<'a> for &'a str {
    fn into_arg(self) -> Cow<'a, str> {
        Cow::Borrowed(self)
    }
}

impl<'a> Arg<'a> for String {
    fn into_arg(self) -> Cow<'a, str> {
        Cow::Owned(self)
    }
}

impl<'a> Arg<'a> for i64 {
    fn into_arg(self) -> Cow<'a, str> {
        // The digits, without `fmt`'s machinery (a lock's release has five
        // numbers): one allocation.
        let mut text = String::with_capacity(20);
        crate::spell::push_decimal(&mut text, self);
        Cow::Owned(text)
    }
}

/// A script's reply, as Redis converts a Lua value (`false`/`nil` → nil,
/// a number → an integer, truncated; a table → an array up to its first
/// nil; `{err=...}` or `redis.error_reply` → an error reply).
///
/// ```
/// use redisync::Reply;
/// assert_eq!(Reply::Int(3).as_int(), Some(3));
/// assert_eq!(Reply::Bulk(b"7".to_vec()).as_text(), Some("7"));
/// assert!(Reply::Nil.is_nil());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// Nil (Lua `nil` or `false`).
    Nil,
    /// An integer.
    Int(i64),
    /// A bulk string (a Lua string).
    Bulk(Vec<u8>),
    /// A status reply (`{ok=...}`).
    Status(String),
    /// An array (a Lua table).
    Array(Vec<Reply>),
    /// An error reply (`{err=...}`, `redis.error_reply`, or a command that
    /// failed inside the script): its whole text, code first
    /// (`WRONGTYPE Operation against a key ...`).
    Error(String),
}

impl Reply {
    /// Whether it is nil.
    ///
    /// ```
    /// assert!(!redisync::Reply::Int(0).is_nil());
    /// ```
    pub fn is_nil(&self) -> bool {
        matches!(self, Reply::Nil)
    }

    /// The integer, if it is one.
    ///
    /// ```
    /// assert_eq!(redisync::Reply::Nil.as_int(), None);
    /// ```
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(value) => Some(*value),
            _ => None,
        }
    }

    /// The text of a bulk string or status, if it is one and UTF-8.
    ///
    /// ```
    /// assert_eq!(redisync::Reply::Status("OK".into()).as_text(), Some("OK"));
    /// ```
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Reply::Bulk(bytes) => std::str::from_utf8(bytes).ok(),
            Reply::Status(text) => Some(text),
            _ => None,
        }
    }

    /// The items of an array, if it is one.
    ///
    /// ```
    /// use redisync::Reply;
    /// assert_eq!(Reply::Array(vec![Reply::Nil]).as_array().map(<[_]>::len), Some(1));
    /// ```
    pub fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The error code of an error reply (its first word: `ERR`,
    /// `WRONGTYPE`).
    ///
    /// ```
    /// use redisync::Reply;
    /// assert_eq!(Reply::Error("WRONGTYPE Operation".into()).error_code(), Some("WRONGTYPE"));
    /// ```
    pub fn error_code(&self) -> Option<&str> {
        match self {
            Reply::Error(text) => text.split_whitespace().next(),
            _ => None,
        }
    }

    /// A protocol error for a reply an operation did not expect.
    pub(crate) fn unexpected(&self, operation: &str, expected: &str) -> Error {
        Error::protocol(format!(
            "{operation} script returned {self:?}, expected {expected}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::Arg;

    #[test]
    fn numbers_are_spelled_as_to_string_does() {
        for n in [
            0,
            1,
            -1,
            9,
            10,
            42,
            30_000,
            -45,
            i64::MAX,
            i64::MIN,
            1_795_882_107_783,
        ] {
            assert_eq!(n.into_arg(), n.to_string());
        }
    }
}
