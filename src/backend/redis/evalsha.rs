//! `EVALSHA` of a script with a call's keys and arguments (and its window),
//! written into one buffer and loaded on `NOSCRIPT`; each script's SHA1
//! computed once per backend ([`Loaded`]).

use crate::fast_map::FastMap;
use std::sync::Arc;

use parking_lot::RwLock;
use redis::{ConnectionLike, RedisResult};

use crate::backend::{Script, ScriptCall};

/// The `redis` crate's form of each script this backend ran (its code and
/// SHA1, for EVALSHA), made once: hashing the code on every call would cost
/// more than the lookup. Here, not on [`Script`]: the seam a store outside
/// the crate sees holds no `redis` crate type.
///
/// Keyed by where the script's code lives and its length (a `&'static str`:
/// the same place always holds the same code), and whether it is the
/// sharded form (a function of the code), so two scripts made apart with
/// one code share an entry and two with the same id but other code do not.
#[derive(Default)]
pub(super) struct Loaded(RwLock<FastMap<(usize, usize, bool), Arc<redis::Script>>>);

impl Loaded {
    /// `script`'s form for EVALSHA: of its [`code`](Script::code) or,
    /// `sharded`, of its [`sharded_code`](Script::sharded_code).
    pub(super) fn get(&self, script: &Script, sharded: bool) -> Arc<redis::Script> {
        let code = script.code();
        let key = (code.as_ptr() as usize, code.len(), sharded);
        if let Some(loaded) = self.0.read().get(&key) {
            return Arc::clone(loaded);
        }
        let made = Arc::new(redis::Script::new(if sharded {
            script.sharded_code()
        } else {
            code
        }));
        Arc::clone(self.0.write().entry(key).or_insert(made))
    }
}

/// `EVALSHA` of `script` with `call`'s KEYS and ARGV (and `window`, last),
/// loading the script on NOSCRIPT and sending it again, as the `redis`
/// crate's `ScriptInvocation::invoke` does; but the command is built in
/// place, in one buffer, where an invocation first copies every key and
/// argument into a vector of its own (two allocations each) and then into
/// the command: a dozen allocations less per script.
pub(super) fn evalsha(
    script: &redis::Script,
    call: &ScriptCall<'_>,
    window: Option<i64>,
    conn: &mut dyn ConnectionLike,
) -> RedisResult<redis::Value> {
    let (keys, args) = (call.keys(), call.args());
    let items = keys.len() + args.len() + usize::from(window.is_some());
    let data = keys
        .iter()
        .chain(args)
        .map(|item| item.len())
        .sum::<usize>()
        + window.map_or(0, |_| 20)
        + "EVALSHA".len()
        + script.get_hash().len()
        + 4;
    let mut cmd = redis::Cmd::with_capacity(3 + items, data);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
    for item in keys.iter().chain(args) {
        cmd.arg(item.as_ref());
    }
    if let Some(window) = window {
        cmd.arg(window);
    }
    match cmd.query(conn) {
        Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load(conn)?;
            cmd.query(conn)
        }
        result => result,
    }
}

/// [`evalsha`] on a connection to one server: the command written in
/// RESP straight into one buffer of its exact size and sent as it is (a
/// `redis::Cmd` copies every key and argument into its own buffer, then
/// packs them into another: three allocations and two copies more per
/// script). The reply is read and checked as `Cmd::query` does.
pub(super) fn evalsha_packed(
    script: &redis::Script,
    call: &ScriptCall<'_>,
    window: Option<i64>,
    conn: &mut dyn ConnectionLike,
) -> RedisResult<redis::Value> {
    let (keys, args) = (call.keys(), call.args());
    let hash = script.get_hash();
    let mut window_digits = Digits::new();
    let window = window.map(|window| window_digits.of(window));
    let mut key_count = Digits::new();
    let key_count = key_count.of(i64::try_from(keys.len()).unwrap_or(i64::MAX));
    let items = keys
        .iter()
        .chain(args)
        .map(|item| item.as_bytes())
        .chain(window);
    let mut head = Digits::new();
    let head = head.of(
        i64::try_from(3 + keys.len() + args.len() + usize::from(window.is_some()))
            .unwrap_or(i64::MAX),
    );
    // `$<len>\r\n<bytes>\r\n` per item: its length has at most 20 digits.
    let size = 1
        + head.len()
        + 2
        + [b"EVALSHA".as_slice(), hash.as_bytes(), key_count]
            .into_iter()
            .chain(items.clone())
            .map(|item| item.len() + 25)
            .sum::<usize>();
    let mut packed = Vec::with_capacity(size);
    packed.push(b'*');
    packed.extend_from_slice(head);
    packed.extend_from_slice(b"\r\n");
    for item in [b"EVALSHA".as_slice(), hash.as_bytes(), key_count]
        .into_iter()
        .chain(items)
    {
        let mut length = Digits::new();
        packed.push(b'$');
        packed.extend_from_slice(length.of(i64::try_from(item.len()).unwrap_or(i64::MAX)));
        packed.extend_from_slice(b"\r\n");
        packed.extend_from_slice(item);
        packed.extend_from_slice(b"\r\n");
    }
    let send = |conn: &mut dyn ConnectionLike| {
        conn.req_packed_command(&packed)
            .and_then(redis::Value::extract_error)
    };
    match send(conn) {
        Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load(conn)?;
            send(conn)
        }
        result => result,
    }
}

/// An integer's decimal digits, spelled on the stack.
struct Digits([u8; 20]);

impl Digits {
    fn new() -> Digits {
        Digits([0; 20])
    }

    /// `value`'s digits (a negative value is spelled as 0: none is sent).
    fn of(&mut self, value: i64) -> &[u8] {
        let mut rest = u64::try_from(value).unwrap_or(0);
        let mut at = self.0.len();
        loop {
            at -= 1;
            self.0[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        &self.0[at..]
    }
}
