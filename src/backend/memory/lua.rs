//! The bridge to the embedded Lua 5.1 interpreter: runs a script of `lua/`
//! as Redis runs it (`KEYS`, `ARGV`, `redis.call`, `redis.pcall`,
//! `redis.error_reply`, `redis.status_reply`) and converts values both ways
//! with Redis' rules.
//!
//! The keyspace ([`Store`]) lives in the interpreter's application data, so
//! `redis.call` reaches it without a second lock: the caller holds the one
//! mutex over the interpreter and the keyspace for the whole run, which
//! makes a script atomic as on Redis.

use std::borrow::Cow;
use std::collections::HashMap;

use mlua::{
    AppDataRefMut, BorrowedBytes, Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value,
};

use super::commands::{self, Store};
use super::keyspace::format_g17;
use crate::backend::Reply;

/// `redis.*` as Redis 7 defines it for the scripts, around the two Rust
/// command runners: `call` raises a command's error reply, `pcall` returns
/// it as `{err=...}`.
const REDIS_LIB: &str = r#"
local call, pcall = ...
local type = type
redis = {}
redis.call = call
redis.pcall = pcall
redis.error_reply = function(message)
    if type(message) ~= 'string' then
        return {err = 'ERR wrong number or type of arguments'}
    end
    return {err = message}
end
redis.status_reply = function(message)
    if type(message) ~= 'string' then
        return {err = 'ERR wrong number or type of arguments'}
    end
    return {ok = message}
end
-- A no-op since Redis 7 (effects replication is the only mode).
redis.replicate_commands = function()
    return true
end
-- Globals are read-only to scripts, and reading a missing one is an error,
-- as on Redis 7: a script that forgets a `local` fails here as it would
-- there. (Redis also freezes the existing globals, which plain Lua 5.1
-- cannot.)
local error, tostring = error, tostring
setmetatable(_G, {
    __index = function(_, name)
        error("Script attempted to access nonexistent global variable '"
            .. tostring(name) .. "'", 2)
    end,
    __newindex = function()
        error('Attempt to modify a readonly table', 2)
    end,
})
"#;

/// Runs a compiled script in protected mode: `true, reply` or `false,
/// error value` (a Lua error never escapes as an mlua error, whose text
/// would carry a traceback).
const RUNNER: &str = r"
local pcall = pcall
return function(script)
    return pcall(script)
end
";

/// Nesting past this in a script's reply is refused (a table that contains
/// itself would never end).
const MAX_REPLY_DEPTH: usize = 1_000;

/// The interpreter, with the keyspace in its application data.
pub(super) struct Engine {
    lua: Lua,
    runner: Function,
    /// Compiled scripts by the address and length of their code: a
    /// script's code is `&'static`, so its address names it, and hashing
    /// two words is cheaper than hashing kilobytes of code on every call.
    scripts: HashMap<(usize, usize), Function>,
    /// `KEYS` and `ARGV`, reused from call to call.
    keys: Table,
    argv: Table,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("scripts", &self.scripts.len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An interpreter with Redis' libraries (base, table, string, math) and
    /// `redis.*` over `store`.
    pub(super) fn new(store: Store) -> mlua::Result<Self> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::new(),
        )?;
        lua.set_app_data(store);
        let call = lua.create_function(redis_call)?;
        let pcall = lua.create_function(redis_pcall)?;
        lua.load(REDIS_LIB)
            .set_name("@redis_lib")
            .call::<()>((call, pcall))?;
        let runner = lua.load(RUNNER).set_name("@runner").call::<Function>(())?;
        let keys = lua.create_table_with_capacity(8, 0)?;
        let argv = lua.create_table_with_capacity(8, 0)?;
        // The same two tables for every call (refilled by `run`); the
        // scripts only read them.
        lua.globals().raw_set("KEYS", &keys)?;
        lua.globals().raw_set("ARGV", &argv)?;
        Ok(Engine {
            lua,
            runner,
            scripts: HashMap::new(),
            keys,
            argv,
        })
    }

    /// The keyspace. Not to be held across [`run`](Self::run).
    pub(super) fn store(&self) -> mlua::Result<AppDataRefMut<'_, Store>> {
        self.lua
            .app_data_mut::<Store>()
            .ok_or_else(|| mlua::Error::runtime("the keyspace is missing"))
    }

    /// Runs `code` with `keys` and `args` as Redis runs a script: the clock
    /// read once (expiry and `TIME` use that instant throughout), expired
    /// keys dropped first, and the script's value converted to a reply. A
    /// script's error (a failed `redis.call`, a Lua runtime error) is a
    /// [`Reply::Error`]; `Err` is only for the interpreter failing itself.
    pub(super) fn run(
        &mut self,
        code: &'static str,
        keys: &[Cow<'_, str>],
        args: &[Cow<'_, str>],
    ) -> mlua::Result<Reply> {
        self.store()?.start_run();
        let script = match self.script(code)? {
            Ok(script) => script,
            Err(reply) => return Ok(reply),
        };
        fill(&self.keys, keys)?;
        fill(&self.argv, args)?;
        let (ok, value) = self.runner.call::<(bool, Value)>(script)?;
        Ok(if ok {
            to_reply(&value, 0)
        } else {
            Reply::Error(error_text(&value))
        })
    }

    /// The compiled function of `code`, compiled on first use; a script
    /// that does not compile is an error reply, as Redis words it.
    fn script(&mut self, code: &'static str) -> mlua::Result<Result<Function, Reply>> {
        let id = (code.as_ptr().addr(), code.len());
        if let Some(script) = self.scripts.get(&id) {
            return Ok(Ok(script.clone()));
        }
        // `@user_script` makes Lua's messages read `user_script:12: ...`,
        // as on Redis.
        match self.lua.load(code).set_name("@user_script").into_function() {
            Ok(script) => {
                self.scripts.insert(id, script.clone());
                Ok(Ok(script))
            }
            Err(mlua::Error::SyntaxError { message, .. }) => Ok(Err(Reply::Error(format!(
                "ERR Error compiling script (new function): {message}"
            )))),
            Err(other) => Err(other),
        }
    }
}

/// Sets `table` to the 1-based sequence `items` (a Redis script's `KEYS` or
/// `ARGV`: strings), clearing what a previous call left past its end.
fn fill(table: &Table, items: &[Cow<'_, str>]) -> mlua::Result<()> {
    let stale = table.raw_len();
    for (i, item) in items.iter().enumerate() {
        table.raw_set(i + 1, item.as_ref())?;
    }
    for i in items.len() + 1..=stale {
        table.raw_set(i, Value::Nil)?;
    }
    Ok(())
}

/// A command's error reply raised by `redis.call`: the runner's `pcall`
/// gets it back (as mlua's error value) and the script's reply is its text.
#[derive(Debug)]
struct CommandError(String);

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CommandError {}

/// `redis.call`: runs one command and raises its error reply (a bad
/// argument, an unknown command, the command's own error). Raised from
/// Rust rather than by a Lua wrapper around `redis.pcall`: one Lua call
/// less on every command.
fn redis_call(lua: &Lua, values: MultiValue) -> mlua::Result<Value> {
    match command_reply(lua, &values)? {
        Reply::Error(text) => Err(mlua::Error::external(CommandError(text))),
        reply => to_lua(lua, reply),
    }
}

/// `redis.pcall`: runs one command; an error reply is returned as
/// `{err=...}`.
fn redis_pcall(lua: &Lua, values: MultiValue) -> mlua::Result<Value> {
    let reply = command_reply(lua, &values)?;
    to_lua(lua, reply)
}

/// Runs the command `values` (its name first) on the keyspace.
fn command_reply(lua: &Lua, values: &MultiValue) -> mlua::Result<Reply> {
    // Redis writes a Lua number with "%.17g" (Lua's own tostring would lose
    // precision); strings are borrowed from Lua, not copied. The scripts
    // pass at most a few arguments: up to `INLINE` live on the stack, so a
    // call allocates nothing here.
    const INLINE: usize = 8;
    if values.len() > INLINE {
        return command_reply_many(lua, values);
    }
    let mut numbers: [Option<String>; INLINE] = Default::default();
    let mut strings: [Option<BorrowedBytes<'_>>; INLINE] = Default::default();
    for (i, value) in values.iter().enumerate() {
        match value {
            Value::String(text) => strings[i] = Some(text.as_bytes()),
            #[allow(clippy::cast_precision_loss)] // an integer from a Lua 5.1 double: exact
            Value::Integer(n) => numbers[i] = Some(format_g17(*n as f64)),
            Value::Number(n) => numbers[i] = Some(format_g17(*n)),
            _ => return Ok(not_a_string()),
        }
    }
    let mut slices: [&[u8]; INLINE] = [&[]; INLINE];
    for (i, slice) in slices.iter_mut().enumerate().take(values.len()) {
        *slice = match (&strings[i], &numbers[i]) {
            (Some(bytes), _) => bytes,
            (None, Some(text)) => text.as_bytes(),
            (None, None) => &[],
        };
    }
    execute(lua, &slices[..values.len()])
}

/// Runs a command on the keyspace of `lua`.
fn execute(lua: &Lua, args: &[&[u8]]) -> mlua::Result<Reply> {
    let mut store = lua
        .app_data_mut::<Store>()
        .ok_or_else(|| mlua::Error::runtime("the keyspace is missing"))?;
    Ok(commands::execute(&mut store, args))
}

/// The error reply for an argument that is neither a string nor a number.
fn not_a_string() -> Reply {
    Reply::Error("ERR Lua redis lib command arguments must be strings or integers".to_owned())
}

/// [`command_reply`] with more arguments than fit on the stack.
fn command_reply_many(lua: &Lua, values: &MultiValue) -> mlua::Result<Reply> {
    let mut owned: Vec<Vec<u8>> = Vec::with_capacity(values.len());
    for value in values {
        owned.push(match value {
            Value::String(text) => text.as_bytes().to_vec(),
            #[allow(clippy::cast_precision_loss)] // an integer from a Lua 5.1 double: exact
            Value::Integer(n) => format_g17(*n as f64).into_bytes(),
            Value::Number(n) => format_g17(*n).into_bytes(),
            _ => return Ok(not_a_string()),
        });
    }
    let slices: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
    execute(lua, &slices)
}

/// A command's reply as Redis hands it to Lua: an integer as a number, a
/// bulk string as a string, nil as `false`, an array as a table, a status
/// as `{ok=...}`, an error as `{err=...}`.
fn to_lua(lua: &Lua, reply: Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Nil => Value::Boolean(false),
        Reply::Int(n) => Value::Integer(n),
        Reply::Bulk(bytes) => Value::String(lua.create_string(bytes)?),
        Reply::Status(text) => {
            let table = lua.create_table_with_capacity(0, 1)?;
            table.raw_set("ok", text)?;
            Value::Table(table)
        }
        Reply::Error(text) => {
            let table = lua.create_table_with_capacity(0, 1)?;
            table.raw_set("err", text)?;
            Value::Table(table)
        }
        Reply::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                table.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(table)
        }
    })
}

/// A script's value as Redis replies with it: nil and `false` → nil,
/// `true` → 1, a number → an integer (truncated toward zero), a string → a
/// bulk string, a table with a string `err` → an error, with a string `ok`
/// → a status, any other table → an array up to its first nil.
pub(super) fn to_reply(value: &Value, depth: usize) -> Reply {
    match value {
        Value::Boolean(true) => Reply::Int(1),
        Value::Integer(n) => Reply::Int(*n),
        Value::Number(n) => Reply::Int(truncate(*n)),
        Value::String(text) => Reply::Bulk(text.as_bytes().to_vec()),
        Value::Table(table) => table_reply(table, depth),
        _ => Reply::Nil,
    }
}

fn table_reply(table: &Table, depth: usize) -> Reply {
    if depth >= MAX_REPLY_DEPTH {
        return Reply::Error("ERR reached lua stack limit".to_owned());
    }
    if let Ok(Value::String(text)) = table.raw_get::<Value>("err") {
        return Reply::Error(text.to_string_lossy());
    }
    if let Ok(Value::String(text)) = table.raw_get::<Value>("ok") {
        return Reply::Status(text.to_string_lossy());
    }
    let mut items = Vec::new();
    for i in 1.. {
        match table.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(item) => items.push(to_reply(&item, depth + 1)),
        }
    }
    Reply::Array(items)
}

/// A Lua number as Redis' C cast `(long long)` gives it on x86-64: toward
/// zero, and `i64::MIN` for NaN and anything out of range.
#[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
fn truncate(n: f64) -> i64 {
    if n.is_nan() || n >= i64::MAX as f64 || n < i64::MIN as f64 {
        i64::MIN
    } else {
        n as i64
    }
}

/// The error reply a `redis.call` raised, found in the error mlua hands
/// back for it.
fn command_error(err: &mlua::Error) -> Option<&str> {
    match err {
        mlua::Error::CallbackError { cause, .. } => command_error(cause),
        mlua::Error::ExternalError(source) => source
            .downcast_ref::<CommandError>()
            .map(|error| error.0.as_str()),
        _ => None,
    }
}

/// The text of a script's error: a raised `{err=...}` (a failed
/// `redis.call`, or the script's own `error({err=...})`) as it is; a
/// runtime error or `error('text')` with Redis' `ERR` code.
fn error_text(value: &Value) -> String {
    match value {
        Value::Table(table) => match table.raw_get::<Value>("err") {
            Ok(Value::String(text)) => text.to_string_lossy(),
            _ => "ERR user_script: an error object that is not a string".to_owned(),
        },
        Value::String(text) => format!("ERR {}", text.to_string_lossy()),
        Value::Integer(n) => format!("ERR {n}"),
        Value::Number(n) => format!("ERR {}", format_g17(*n)),
        Value::Error(err) => command_error(err).map_or_else(|| format!("ERR {err}"), str::to_owned),
        _ => "ERR user_script: an error object that is not a string".to_owned(),
    }
}
