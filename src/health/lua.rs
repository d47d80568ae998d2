//! Health checks written in Lua, in Argo CD's format, so that the scripts of Argo CD's
//! `resource.customizations.health.<group>_<kind>` settings and of its
//! `resource_customizations/<group>/<kind>/health.lua` files run here unchanged.
//!
//! The contract is Argo CD's (`util/lua/lua.go`): a script is a Lua chunk that sees the live
//! object as the global `obj` (JSON mappings as tables, lists as tables indexed from 1, `null` as
//! `nil`, numbers as Lua numbers) and returns a table `{status = "...", message = "..."}`, where
//! `status` is one of `Healthy`, `Progressing`, `Degraded`, `Suspended`, `Missing`, `Unknown`.
//!
//! What a script may use: the base library without `dofile`, `loadfile`, `load`, `loadstring`,
//! `getfenv`, `setfenv`, `collectgarbage`, `gcinfo`, `module` and `newproxy` (`print` does
//! nothing); `table`, `string` (without `string.dump`) and `math`; an `os` table with only
//! `os.time` and `os.date`; and `require` of `"os"`, `"string"`, `"table"` or `"math"`, which
//! gives those tables (Argo CD preloads its safe `os` so that `local os = require("os")` works).
//! No `io`, `package`, `debug` or `coroutine`. Each call runs in a fresh Lua state (as in Argo
//! CD, a script cannot leave globals behind for the next object), stopped after
//! [`TIME_LIMIT`] of wall-clock time and held to [`MEMORY_LIMIT`] bytes. A script that catches
//! the time limit's error with `pcall` or `xpcall` gets it again as soon as the protected call
//! returns, so it cannot keep running.
//!
//! The time limit is checked between Lua instructions, so one call of a library function written
//! in C (a pattern match that backtracks without end over a long string) is not interrupted
//! while it runs; Argo CD's gopher-lua checks its deadline between instructions too.
//!
//! The language is Argo CD's: gopher-lua is Lua 5.1 with Lua 5.2's `goto` (Argo CD's own scripts
//! use `goto continue`). It runs here in Lua 5.2, whose other changes do not show in such
//! scripts, with the 5.1 functions 5.2 dropped put back: `unpack`, `table.getn`, `table.maxn`,
//! `math.mod`, `math.pow`, `math.log10`, `string.gfind`.
//!
//! Pure but for [`LuaCheck::from_file`] and [`LuaDir::load`], which read files.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mlua::chunk::ChunkMode;
use mlua::{HookTriggers, Lua, LuaOptions, StdLib, Table, VmState};
use serde_json::Value;

use super::{Assessment, Health};
use crate::object::Object;

/// Wall-clock time one call of a script may take (Argo CD gives its scripts 1 s too).
pub const TIME_LIMIT: Duration = Duration::from_secs(1);

/// Bytes of memory one call's Lua state may hold: 64 MiB, including the copy of the object the
/// script reads (a large object takes a few times its JSON size as Lua tables). Argo CD sets no
/// such limit.
pub const MEMORY_LIMIT: usize = 64 * 1024 * 1024;

/// The file name of a health check in a [`LuaDir`], as in Argo CD's `resource_customizations`.
pub const SCRIPT_FILE: &str = "health.lua";

/// The largest script file read: 1 MiB (Argo CD's longest is under 10 KiB).
pub const MAX_SCRIPT_BYTES: u64 = 1024 * 1024;

/// The longest string `string.find`, `match`, `gmatch` and `gsub` match a pattern against: 8 KiB.
/// Lua's pattern matcher is C, which the time limit cannot stop, and it backtracks: the trim
/// idiom `s:match("^%s*(.-)%s*$")` takes time quadratic in the length (13 s on a 50 KB status
/// message, 0.3 s on 8 KiB). A plain find (`string.find(s, p, init, true)`) has no limit.
pub const MAX_MATCH_SUBJECT: usize = 8 * 1024;

/// The longest message a check's verdict keeps: 4 KiB (a longer one is cut, marked `...`).
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024;

/// How many Lua instructions run between two looks at the clock.
const CLOCK_EVERY: u32 = 1000;

/// Argo CD's message (`invalidHealthStatus`) for a status outside the six it knows.
const INVALID_HEALTH_STATUS: &str = "Lua returned an invalid health status";

/// The longest chunk name Lua 5.1 shows in full in its messages (`LUA_IDSIZE` less one).
const CHUNK_NAME_MAX: usize = 59;

/// Runs before each script, in its state: `pcall` and `xpcall` that give a caught time-limit
/// error back (`guard` raises it once the time is up), and a `require` that gives only the
/// libraries of the sandbox.
///
/// `xpcall` calls its handler after the protected call has returned rather than where the error
/// was raised: Lua 5.1 runs an error handler with hooks off when the error comes from a hook, so
/// a handler that never returned would escape the time limit. Without the `debug` library a
/// handler cannot tell the difference; its result and an error in it give what Lua 5.1 gives
/// (`false` and the handler's first result, or `false, "error in error handling"`).
const PRELUDE: &str = r#"
local guard, raw_pcall, tostring, error, max_subject = ...
-- Lua 5.1's functions that 5.2 dropped or moved, as gopher-lua has them.
unpack = unpack or table.unpack
table.getn = table.getn or function(t) return #t end
table.maxn = table.maxn or function(t)
  local n = 0
  for k in next, t do
    if type(k) == "number" and k > n then n = k end
  end
  return n
end
math.mod = math.mod or math.fmod
math.pow = math.pow or function(x, y) return x ^ y end
math.log10 = math.log10 or function(x) return math.log(x, 10) end
string.gfind = string.gfind or string.gmatch
-- No finalizers: Lua 5.2 runs `__gc` with hooks off, out of the time limit's reach (gopher-lua,
-- as Lua 5.1, never runs `__gc` of a table).
local raw_setmetatable, rawget, type = setmetatable, rawget, type
function setmetatable(t, mt)
  if type(mt) == "table" and rawget(mt, "__gc") ~= nil then
    error("__gc is not allowed in a health check", 2)
  end
  return raw_setmetatable(t, mt)
end
-- Pattern matching is C the time limit cannot stop: the subject's length is capped.
for _, name in ipairs({"find", "match", "gmatch", "gsub"}) do
  local f = string[name]
  string[name] = function(s, p, a, plain)
    if type(s) == "string" and #s > max_subject and not (name == "find" and plain) then
      error("string." .. name .. " on " .. #s .. " bytes: a health check may match patterns on at most " .. max_subject .. " bytes", 2)
    end
    return f(s, p, a, plain)
  end
end
local modules = { os = os, string = string, table = table, math = math }
local function pass(ok, ...)
  if not ok then guard() end
  return ok, ...
end
local function handle(handler, ok, ...)
  if ok then return true, ... end
  guard()
  local handled, result = raw_pcall(handler, (...))
  if not handled then
    guard()
    return false, "error in error handling"
  end
  return false, result
end
function pcall(f, ...) return pass(raw_pcall(f, ...)) end
function xpcall(f, handler)
  if handler == nil then error("bad argument #2 to 'xpcall' (value expected)", 2) end
  return handle(handler, raw_pcall(f))
end
function require(name)
  local m = modules[name]
  if m == nil then
    error("module '" .. tostring(name) .. "' not found: a health check may require only os, string, table and math", 2)
  end
  return m
end
"#;

/// Errors from loading health checks: a file that cannot be read, a script that does not
/// compile, a folder name that is not UTF-8.
#[derive(Debug, thiserror::Error)]
pub enum LuaError {
    /// A file or folder could not be read.
    #[error("cannot read {}: {cause}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// Why (in the message, not a separate source: it would be said twice).
        cause: std::io::Error,
    },
    /// A script does not compile: `<origin>:<line>: <message>`, as Lua words it
    /// (`'=' expected near 'status'`).
    #[error("{origin}:{line}: {message}")]
    Syntax {
        /// The script's file path or label.
        origin: String,
        /// The line (from 1) Lua names.
        line: u32,
        /// Lua's message, without the place.
        message: String,
    },
    /// Lua could not compile a script for another reason: it is bytecode rather than text (which
    /// Lua 5.1 would run unchecked), or compiling it ran out of [`MEMORY_LIMIT`].
    #[error("{origin}: cannot compile: {message}")]
    Compile {
        /// The script's file path or label.
        origin: String,
        /// What Lua said.
        message: String,
    },
    /// A folder under a [`LuaDir`]'s root whose name is not UTF-8, so names no group or kind.
    #[error("{}: a folder name must be UTF-8 to name a group or kind", path.display())]
    Name {
        /// The folder.
        path: PathBuf,
    },
}

/// One health check: a Lua script in Argo CD's format (the value of a
/// `resource.customizations.health.<group>_<kind>` setting, or a
/// `resource_customizations/<group>/<kind>/health.lua` file), compiled once.
///
/// Cheap to clone (the source and its compiled form are shared), `Send` and `Sync`: the Lua
/// state a call runs in is made for that call and dropped after it.
#[derive(Clone)]
pub struct LuaCheck {
    origin: Arc<str>,
    source: Arc<str>,
    /// The chunk name given to Lua: the origin, or its end when Lua would cut it.
    chunk_name: Arc<str>,
    /// The script compiled by Lua 5.1 (`string.dump` form, with line numbers), loaded into each
    /// call's state instead of the source: only bytecode made here is ever loaded.
    bytecode: Arc<[u8]>,
}

impl fmt::Debug for LuaCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LuaCheck")
            .field("origin", &self.origin)
            .field("source_bytes", &self.source.len())
            .finish()
    }
}

/// Why a call gave no verdict of the script's own.
enum Failure {
    /// Past [`TIME_LIMIT`].
    Time,
    /// Out of [`MEMORY_LIMIT`].
    Memory,
    /// A runtime error: its first line.
    Error(String),
    /// The script returned something other than a table or nil: its Lua type name.
    NotATable(&'static str),
    /// The state could not be set up (the object could not be passed to Lua).
    Setup(String),
    /// The script returned a status outside the six: the value as the message shows it (a
    /// string quoted and cut to 64 bytes, or another value's Lua type name).
    InvalidStatus(String),
}

impl LuaCheck {
    /// Compiles `source`, a Lua 5.1 chunk in Argo CD's health-check format, to report syntax
    /// errors now rather than on every object. `origin` names the script in messages: a file
    /// path, or a label such as `example.com/Widget`.
    ///
    /// # Errors
    ///
    /// [`LuaError::Syntax`] (`<origin>:<line>: <message>`) when the source does not compile,
    /// [`LuaError::Compile`] when Lua cannot compile it for another reason.
    pub fn new(origin: impl Into<String>, source: impl Into<String>) -> Result<LuaCheck, LuaError> {
        let origin: String = origin.into();
        let source: String = source.into();
        let chunk_name = chunk_name(&origin);
        let compile_error = |e: mlua::Error| match e {
            mlua::Error::SyntaxError { message, .. } => {
                let (line, message) = split_place(&message, &chunk_name);
                match line {
                    Some(line) => LuaError::Syntax {
                        origin: origin.clone(),
                        line,
                        message: message.to_string(),
                    },
                    None => LuaError::Compile {
                        origin: origin.clone(),
                        message: message.to_string(),
                    },
                }
            }
            other => LuaError::Compile {
                origin: origin.clone(),
                message: first_line(&other.to_string()).to_string(),
            },
        };
        let lua = Lua::new_with(StdLib::NONE, LuaOptions::default()).map_err(compile_error)?;
        lua.set_memory_limit(MEMORY_LIMIT).map_err(compile_error)?;
        let function = lua
            .load(source.as_str())
            .set_name(format!("={chunk_name}"))
            .set_mode(ChunkMode::Text)
            .into_function()
            .map_err(compile_error)?;
        let bytecode = function.dump(false);
        Ok(LuaCheck {
            origin: origin.into(),
            source: source.into(),
            chunk_name: chunk_name.into(),
            bytecode: bytecode.into(),
        })
    }

    /// Reads and compiles a script file; its path (as given) is the origin.
    ///
    /// # Errors
    ///
    /// [`LuaError::Io`] when the file cannot be read or is not UTF-8; [`LuaError::Syntax`] or
    /// [`LuaError::Compile`] as [`LuaCheck::new`].
    pub fn from_file(path: &Path) -> Result<LuaCheck, LuaError> {
        let io = |cause| LuaError::Io {
            path: path.to_path_buf(),
            cause,
        };
        // Only a regular file of a script's size: a device (`/dev/zero`) or a FIFO would be
        // read without end.
        let meta = std::fs::metadata(path).map_err(io)?;
        if !meta.is_file() {
            return Err(io(std::io::Error::other("not a regular file")));
        }
        if meta.len() > MAX_SCRIPT_BYTES {
            return Err(io(std::io::Error::other(format!(
                "{} bytes: a health check may be at most {MAX_SCRIPT_BYTES} bytes",
                meta.len()
            ))));
        }
        let source = std::fs::read_to_string(path).map_err(io)?;
        LuaCheck::new(path.display().to_string(), source)
    }

    /// The file path or label that names the script in messages.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The script's source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Runs the script on `obj` in a fresh sandboxed state and gives its verdict.
    ///
    /// `None` when the script gives no verdict (returns `nil`, or a table without a `status` or
    /// with an empty one): the caller goes on to its next rules. `Some` with the script's status
    /// and message (`""` when it gives none; a number is written as Lua writes it). `Unknown`
    /// when the script fails:
    /// - a status outside the six: `... Lua returned an invalid health status ("Fine"; one of
    ///   ...)` (Argo CD's text, with the value returned: a string quoted and cut to 64
    ///   characters, or the Lua type of another value; not shown for a Secret);
    /// - a value other than a table or `nil`: `... expect table output from Lua script, not
    ///   <type>` (Argo CD's text, with Lua's type name);
    /// - a runtime error: its first line and the script's line, without the stack traceback;
    ///   for a Secret the error is not shown, since it may quote the Secret's values;
    /// - past [`TIME_LIMIT`] or out of [`MEMORY_LIMIT`]: says which limit it hit.
    pub fn assess(&self, obj: &Object) -> Option<Assessment> {
        let failure = match self.run(obj) {
            Ok(verdict) => return verdict,
            Err(failure) => failure,
        };
        let origin = &self.origin;
        let message = match failure {
            Failure::Time => format!(
                "Lua health check {origin} was stopped: it ran past its time limit of {} s",
                TIME_LIMIT.as_secs_f64()
            ),
            Failure::Memory => format!(
                "Lua health check {origin} was stopped: it ran out of its memory limit of {} MiB",
                MEMORY_LIMIT / (1024 * 1024)
            ),
            Failure::NotATable(t) => {
                format!(
                    "Lua health check {origin} failed: expect table output from Lua script, not {t}"
                )
            }
            Failure::Setup(e) => format!("Lua health check {origin} could not start: {e}"),
            // The status may be a value of the object: not shown for a Secret.
            Failure::InvalidStatus(_) if obj.is_secret() => {
                format!("Lua health check {origin} failed: {INVALID_HEALTH_STATUS}")
            }
            Failure::InvalidStatus(shown) => format!(
                "Lua health check {origin} failed: {INVALID_HEALTH_STATUS} ({shown}; one of Healthy, Progressing, Degraded, Suspended, Missing, Unknown)"
            ),
            Failure::Error(e) => {
                let (line, text) = split_place(&e, &self.chunk_name);
                let at = line.map(|l| format!(" at line {l}")).unwrap_or_default();
                if obj.is_secret() {
                    format!(
                        "Lua health check {origin} failed{at} (the error is not shown: it may quote this Secret's values)"
                    )
                } else {
                    format!("Lua health check {origin} failed{at}: {text}")
                }
            }
        };
        Some(Assessment {
            health: Health::Unknown,
            message,
        })
    }

    fn run(&self, obj: &Object) -> Result<Option<Assessment>, Failure> {
        let deadline = Instant::now() + TIME_LIMIT;
        let expired = Rc::new(Cell::new(false));
        // Classify an error, the time limit first: a script stopped by the clock may report it
        // as whatever error it raised last.
        let fail = {
            let expired = expired.clone();
            move |e: mlua::Error| {
                if expired.get() {
                    Failure::Time
                } else if is_memory_error(&e) {
                    Failure::Memory
                } else {
                    Failure::Error(first_line(&error_text(&e)).to_string())
                }
            }
        };
        let setup = |e: mlua::Error| {
            if is_memory_error(&e) {
                Failure::Memory
            } else {
                Failure::Setup(first_line(&e.to_string()).to_string())
            }
        };
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::OS,
            LuaOptions::default(),
        )
        .map_err(setup)?;
        lua.set_memory_limit(MEMORY_LIMIT).map_err(setup)?;
        sandbox(&lua, deadline, expired.clone()).map_err(setup)?;
        let value = mapping_to_lua(&lua, obj.as_map()).map_err(setup)?;
        lua.globals().raw_set("obj", value).map_err(setup)?;
        let hook_expired = expired.clone();
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(CLOCK_EVERY),
            move |_, _| {
                if hook_expired.get() || Instant::now() >= deadline {
                    hook_expired.set(true);
                    Err(mlua::Error::runtime("the time limit has passed"))
                } else {
                    Ok(VmState::Continue)
                }
            },
        )
        .map_err(setup)?;
        let function = lua
            .load(&self.bytecode[..])
            .set_name(format!("={}", self.chunk_name))
            .set_mode(ChunkMode::Binary)
            .into_function()
            .map_err(setup)?;
        let returned: mlua::MultiValue = function.call(()).map_err(&fail)?;
        // Argo CD reads the value on top of the stack: the last one returned.
        let result = returned.into_iter().last().unwrap_or(mlua::Value::Nil);
        let table = match result {
            mlua::Value::Nil => return Ok(None),
            mlua::Value::Table(t) => t,
            other => return Err(Failure::NotATable(lua_type(&other))),
        };
        match verdict(&lua, &table).map_err(fail)? {
            Verdict::Valid(v) => Ok(v),
            Verdict::Invalid(shown) => Err(Failure::InvalidStatus(shown)),
        }
    }
}

/// What a returned table says: a verdict (or none), or a status outside the six (how the
/// message shows it).
enum Verdict {
    Valid(Option<Assessment>),
    Invalid(String),
}

/// The verdict in a returned table (read raw: no metamethod runs).
fn verdict(lua: &Lua, table: &Table) -> mlua::Result<Verdict> {
    let status = match table.raw_get::<mlua::Value>("status")? {
        mlua::Value::Nil => return Ok(Verdict::Valid(None)),
        mlua::Value::String(s) => s.to_string_lossy(),
        other => return Ok(Verdict::Invalid(format!("a {}", lua_type(&other)))),
    };
    let health = match status.as_str() {
        "" => return Ok(Verdict::Valid(None)),
        "Healthy" => Health::Healthy,
        "Progressing" => Health::Progressing,
        "Degraded" => Health::Degraded,
        "Suspended" => Health::Suspended,
        "Missing" => Health::Missing,
        "Unknown" => Health::Unknown,
        other => {
            let mut shown: String = other.chars().take(64).collect();
            if shown.len() < other.len() {
                shown.push_str("...");
            }
            return Ok(Verdict::Invalid(format!("{:?}", cut(shown))));
        }
    };
    let message = match table.raw_get::<mlua::Value>("message")? {
        v @ (mlua::Value::String(_) | mlua::Value::Number(_) | mlua::Value::Integer(_)) => lua
            .coerce_string(v)?
            .map(|s| s.to_string_lossy())
            .unwrap_or_default(),
        _ => String::new(),
    };
    Ok(Verdict::Valid(Some(Assessment {
        health,
        message: cut(message),
    })))
}

/// A message cut to [`MAX_MESSAGE_BYTES`] (at a character boundary, marked `...`), with control
/// characters other than line breaks and tabs (a terminal's escape sequences) shown as spaces.
/// Line breaks stay, as Argo CD's scripts write them; `driftless health`'s table output shows
/// them as `\n`.
fn cut(message: String) -> String {
    let mut m: String = message
        .chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                ' '
            } else {
                c
            }
        })
        .collect();
    if m.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !m.is_char_boundary(end) {
            end -= 1;
        }
        m.truncate(end);
        m.push_str("...");
    }
    m
}

/// Leaves a fresh state with only what a health check may use (see the module's doc).
fn sandbox(lua: &Lua, deadline: Instant, expired: Rc<Cell<bool>>) -> mlua::Result<()> {
    let globals = lua.globals();
    for name in [
        "dofile",
        "loadfile",
        "load",
        "loadstring",
        "getfenv",
        "setfenv",
        "collectgarbage",
        "gcinfo",
        "module",
        "newproxy",
        "require",
        "package",
        "io",
        "debug",
        "coroutine",
    ] {
        globals.raw_set(name, mlua::Value::Nil)?;
    }
    globals
        .raw_get::<Table>("string")?
        .raw_set("dump", mlua::Value::Nil)?;
    // Lua 5.1's own os.time and os.date have no side effects; the rest of `os` goes.
    let full_os: Table = globals.raw_get("os")?;
    let os = lua.create_table()?;
    for name in ["time", "date"] {
        os.raw_set(name, full_os.raw_get::<mlua::Function>(name)?)?;
    }
    globals.raw_set("os", os)?;
    globals.raw_set(
        "print",
        lua.create_function(|_, _: mlua::MultiValue| Ok(()))?,
    )?;
    let guard = lua.create_function(move |_, ()| {
        if expired.get() || Instant::now() >= deadline {
            expired.set(true);
            Err(mlua::Error::runtime("the time limit has passed"))
        } else {
            Ok(())
        }
    })?;
    lua.load(PRELUDE)
        .set_name("=sandbox")
        .set_mode(ChunkMode::Text)
        .call::<()>((
            guard,
            globals.raw_get::<mlua::Function>("pcall")?,
            globals.raw_get::<mlua::Function>("tostring")?,
            globals.raw_get::<mlua::Function>("error")?,
            MAX_MATCH_SUBJECT,
        ))
}

/// A JSON value as Lua sees it in Argo CD: mappings and lists as tables (lists from index 1),
/// `null` as `nil`, numbers as Lua numbers (doubles).
fn to_lua(lua: &Lua, value: &Value) -> mlua::Result<mlua::Value> {
    Ok(match value {
        Value::Null => mlua::Value::Nil,
        Value::Bool(b) => mlua::Value::Boolean(*b),
        Value::Number(n) => mlua::Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => mlua::Value::String(lua.create_string(s)?),
        Value::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            mlua::Value::Table(table)
        }
        Value::Object(map) => mlua::Value::Table(mapping_to_lua(lua, map)?),
    })
}

fn mapping_to_lua(lua: &Lua, map: &serde_json::Map<String, Value>) -> mlua::Result<Table> {
    let table = lua.create_table_with_capacity(0, map.len())?;
    for (k, v) in map {
        table.raw_set(k.as_str(), to_lua(lua, v)?)?;
    }
    Ok(table)
}

/// Lua 5.1's name of a value's type (mlua tells integers from other numbers; Lua 5.1 does not).
fn lua_type(value: &mlua::Value) -> &'static str {
    match value {
        mlua::Value::Integer(_) | mlua::Value::Number(_) => "number",
        mlua::Value::LightUserData(_) => "userdata",
        other => other.type_name(),
    }
}

fn is_memory_error(e: &mlua::Error) -> bool {
    match e {
        mlua::Error::MemoryError(_) => true,
        mlua::Error::CallbackError { cause, .. } => is_memory_error(cause),
        _ => false,
    }
}

/// What an error says, without mlua's wrapping of errors raised in Rust callbacks.
fn error_text(e: &mlua::Error) -> String {
    match e {
        mlua::Error::RuntimeError(s) | mlua::Error::MemoryError(s) => s.clone(),
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::CallbackError { cause, .. } => error_text(cause),
        other => other.to_string(),
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// The name Lua shows for a script: its origin, or the origin's end when Lua 5.1 would cut it.
fn chunk_name(origin: &str) -> String {
    if origin.len() <= CHUNK_NAME_MAX {
        return origin.to_string();
    }
    let mut start = origin.len() - (CHUNK_NAME_MAX - 3);
    while !origin.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &origin[start..])
}

/// Splits Lua's `<chunk>:<line>: <message>` into the line and the message; a message that does
/// not start with the chunk's place comes back whole.
fn split_place<'a>(message: &'a str, chunk: &str) -> (Option<u32>, &'a str) {
    let place = message
        .strip_prefix(chunk)
        .and_then(|rest| rest.strip_prefix(':'))
        .and_then(|rest| {
            let digits = rest.find(|c: char| !c.is_ascii_digit())?;
            let line = rest[..digits].parse().ok()?;
            let text = rest[digits..].strip_prefix(": ")?;
            Some((line, text))
        });
    match place {
        Some((line, text)) => (Some(line), text),
        None => (None, message),
    }
}

/// The health checks of a folder laid out like Argo CD's `resource_customizations`:
/// `<group>/<kind>/health.lua`, and `<kind>/health.lua` for a kind of the core group (Argo CD
/// names the core group's scripts by kind alone, `GetConfigMapKey`).
///
/// A group or kind folder whose name holds `_` is a wildcard, as in Argo CD, where `_` stands for
/// any run of characters (Argo CD turns each `_` into a glob `*` matched against
/// `<group>/<kind>`): `_.crossplane.io/_/health.lua` is the check of every kind of every group
/// ending in `.crossplane.io`. Other characters match themselves.
#[derive(Clone, Debug, Default)]
pub struct LuaDir {
    /// Exact checks by group (`""` for core), then kind.
    exact: BTreeMap<String, BTreeMap<String, LuaCheck>>,
    /// Wildcard checks, sorted by their path under the root.
    wildcard: Vec<Wildcard>,
}

#[derive(Clone, Debug)]
struct Wildcard {
    /// The folder path under the root, `/`-separated: `_.crossplane.io/_`, or `_` for core kinds.
    path: String,
    check: LuaCheck,
}

impl LuaDir {
    /// Loads and compiles every `health.lua` under `root`: `root/<group>/<kind>/health.lua` and,
    /// for core kinds, `root/<kind>/health.lua`. A folder without `health.lua` is skipped (Argo
    /// CD's folders also hold `actions/` and `testdata/`), and so are folders whose name starts
    /// with `.`; other files are ignored. Symbolic links are followed.
    ///
    /// # Errors
    ///
    /// [`LuaError::Io`] when a folder or script cannot be read, or a `health.lua` is not a
    /// regular file (a FIFO, a link to a device); [`LuaError::Syntax`] naming the
    /// file and line of the first script (in path order) that does not compile;
    /// [`LuaError::Name`] for a folder name that is not UTF-8.
    pub fn load(root: &Path) -> Result<LuaDir, LuaError> {
        let mut dir = LuaDir::default();
        for (first, first_path) in subfolders(root)? {
            let script = first_path.join(SCRIPT_FILE);
            if script.exists() {
                dir.add("", &first, &script)?;
            }
            for (second, second_path) in subfolders(&first_path)? {
                let script = second_path.join(SCRIPT_FILE);
                if script.exists() {
                    dir.add(&first, &second, &script)?;
                }
            }
        }
        dir.wildcard.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(dir)
    }

    fn add(&mut self, group: &str, kind: &str, script: &Path) -> Result<(), LuaError> {
        let check = LuaCheck::from_file(script)?;
        let path = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{group}/{kind}")
        };
        if path.contains('_') {
            self.wildcard.push(Wildcard { path, check });
        } else {
            self.exact
                .entry(group.to_string())
                .or_default()
                .insert(kind.to_string(), check);
        }
        Ok(())
    }

    /// The check for a group (`""` for core) and kind: the exact one when there is one, else
    /// the first wildcard that matches, in the order of their folder paths under the root
    /// (byte order, as Argo CD sorts its wildcard folders).
    pub fn find(&self, group: &str, kind: &str) -> Option<&LuaCheck> {
        if let Some(check) = self.exact.get(group).and_then(|kinds| kinds.get(kind)) {
            return Some(check);
        }
        self.wildcard
            .iter()
            .find(|w| matches_key(&w.path, group, kind))
            .map(|w| &w.check)
    }

    /// How many checks were loaded (exact and wildcard).
    pub fn len(&self) -> usize {
        self.exact.values().map(BTreeMap::len).sum::<usize>() + self.wildcard.len()
    }

    /// True when no check was loaded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The subfolders of `dir` (names not starting with `.`), sorted by name.
fn subfolders(dir: &Path) -> Result<Vec<(String, PathBuf)>, LuaError> {
    let io = |cause| LuaError::Io {
        path: dir.to_path_buf(),
        cause,
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if !path.is_dir() {
            continue;
        }
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
        else {
            return Err(LuaError::Name { path });
        };
        if !name.starts_with('.') {
            found.push((name, path));
        }
    }
    found.sort();
    Ok(found)
}

/// Argo CD's match of a wildcard folder path against `<group>/<kind>` (`<kind>` for core):
/// `_` is a glob `*`, which matches any run of characters but `/`.
fn matches_key(path: &str, group: &str, kind: &str) -> bool {
    match path.split_once('/') {
        Some((g, k)) => !group.is_empty() && glob(g, group) && glob(k, kind),
        None => group.is_empty() && glob(path, kind),
    }
}

/// `pattern` against `text`, where `_` matches any run of characters (none included).
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    // Where the last `_` was and how much of `text` it has taken.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'_' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const WIDGET: &str = include_str!("../../tests/data/health/lua/example.com/Widget/health.lua");
    const EXAMPLE_ORG: &str =
        include_str!("../../tests/data/health/lua/_.example.org/_/health.lua");
    const SPINNER: &str =
        include_str!("../../tests/data/health/lua-failing/example.com/Spinner/health.lua");
    const HOG: &str =
        include_str!("../../tests/data/health/lua-failing/example.com/Hog/health.lua");
    const ESCAPER: &str =
        include_str!("../../tests/data/health/lua-failing/example.com/Escaper/health.lua");
    const SNOOP: &str =
        include_str!("../../tests/data/health/lua-failing/example.com/Snoop/health.lua");
    const BOOM: &str =
        include_str!("../../tests/data/health/lua-failing/example.com/Boom/health.lua");

    fn data(path: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/health")
            .join(path)
    }

    fn widget(spec: Value, status: Value) -> Object {
        Object::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w1", "namespace": "default"},
            "spec": spec, "status": status,
        }))
        .unwrap()
    }

    fn plain() -> Object {
        widget(json!({}), json!({}))
    }

    fn check(source: &str) -> LuaCheck {
        LuaCheck::new("t", source).unwrap()
    }

    fn verdict(health: Health, message: &str) -> Option<Assessment> {
        Some(Assessment {
            health,
            message: message.to_string(),
        })
    }

    fn unknown(message: &str) -> Option<Assessment> {
        verdict(Health::Unknown, message)
    }

    /// The check's verdict on [`plain`] and how long it took, failing the test (rather than
    /// hanging it) when the check has not returned within 2 s.
    fn within_2_s(check: &LuaCheck) -> (Option<Assessment>, Duration) {
        let (tx, rx) = std::sync::mpsc::channel();
        let check = check.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            let a = check.assess(&plain());
            let _ = tx.send((a, start.elapsed()));
        });
        rx.recv_timeout(Duration::from_secs(2))
            .expect("the check did not return within 2 s")
    }

    /// A normal script still gives its verdict: the failure before it left nothing behind.
    fn still_works() {
        assert_eq!(
            check(r#"return {status = "Healthy", message = obj.metadata.name}"#).assess(&plain()),
            verdict(Health::Healthy, "w1")
        );
    }

    #[test]
    fn a_script_in_argo_cds_format_gives_its_verdict_and_message() {
        let w = check(WIDGET);
        assert_eq!(
            w.assess(&widget(
                json!({}),
                json!({"conditions": [
                    {"type": "Ready", "status": "True", "message": "All parts in place"},
                    {"type": "MountFailed", "status": "False"},
                ]})
            )),
            verdict(Health::Healthy, "All parts in place")
        );
        assert_eq!(
            w.assess(&widget(
                json!({}),
                json!({"conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "MountFailed", "status": "True", "message": "disk gone"},
                    {"type": "Other", "status": "True"},
                    {"type": "PowerFailed", "status": "True"},
                ]})
            )),
            verdict(
                Health::Degraded,
                "MountFailed: disk gone; PowerFailed: no message"
            )
        );
        assert_eq!(
            w.assess(&widget(
                json!({}),
                json!({"conditions": [{"type": "Ready", "status": "False", "reason": "Warming"}]})
            )),
            verdict(Health::Progressing, "Not ready yet: Warming")
        );
        assert_eq!(
            w.assess(&widget(json!({}), Value::Null)),
            verdict(
                Health::Progressing,
                "Waiting for the widget to report its conditions"
            )
        );
        // os.time and os.date: a pause ahead (2100-01-01) suspends, one past does not.
        assert_eq!(
            w.assess(&widget(
                json!({"pausedUntil": 4_102_444_800_u64}),
                json!({})
            )),
            verdict(Health::Suspended, "Paused until 2100-01-01")
        );
        assert_eq!(
            w.assess(&widget(
                json!({"pausedUntil": 946_684_800}),
                json!({"conditions": []})
            )),
            verdict(
                Health::Progressing,
                "Waiting for the widget to become ready"
            )
        );
    }

    #[test]
    fn the_object_reaches_lua_as_argo_cd_passes_it() {
        let obj = widget(
            json!({"items": ["a", "b", "c"], "replicas": 3, "ratio": 0.5, "on": true,
                   "gone": null, "nested": {"deep": [{"x": 1}]}}),
            json!({}),
        );
        let script = r#"
            local s = obj.spec
            assert(#s.items == 3 and s.items[1] == "a" and s.items[3] == "c", "lists from 1")
            assert(s.replicas == 3 and type(s.replicas) == "number", "numbers")
            assert(s.ratio == 0.5, "fractions")
            assert(s.on == true, "booleans")
            assert(s.gone == nil, "null is nil")
            assert(s.nested.deep[1].x == 1, "nesting")
            -- Lua 5.1 functions Argo CD's scripts use.
            assert(unpack({"Healthy"}) == "Healthy" and table.getn(s.items) == 3, "Lua 5.1")
            assert(require("string") == string and require("table") == table, "require")
            assert(require("math") == math and require("os") == os, "require")
            assert(string.format("%d", 7) == "7" and math.max(1, 2) == 2 and ("ab"):upper() == "AB")
            print("print is silent")
            return {status = "Healthy", message = 42}
        "#;
        assert_eq!(check(script).assess(&obj), verdict(Health::Healthy, "42"));
    }

    #[test]
    fn nil_and_tables_without_a_status_give_no_verdict() {
        for script in [
            "return nil",
            "return",
            "local x = 1",
            "return {}",
            r#"return {message = "no status"}"#,
            r#"return {status = ""}"#,
            r#"return {"Healthy"}"#,
        ] {
            assert_eq!(check(script).assess(&plain()), None, "{script}");
        }
        assert_eq!(
            check(r#"return {status = "Missing"}"#).assess(&plain()),
            verdict(Health::Missing, "")
        );
        assert_eq!(
            check(r#"return nil, {status = "Degraded", message = "last"}"#).assess(&plain()),
            verdict(Health::Degraded, "last"),
            "the last value returned, as Argo CD reads the top of the stack"
        );
    }

    #[test]
    fn an_invalid_status_or_a_value_other_than_a_table_is_unknown() {
        for (script, shown) in [
            (r#"return {status = "Fine"}"#, r#""Fine""#),
            (r#"return {status = "healthy"}"#, r#""healthy""#),
            ("return {status = 1}", "a number"),
        ] {
            assert_eq!(
                check(script).assess(&plain()),
                unknown(&format!(
                    "Lua health check t failed: Lua returned an invalid health status ({shown}; one of Healthy, Progressing, Degraded, Suspended, Missing, Unknown)"
                )),
                "{script}"
            );
        }
        for (script, t) in [
            (r#"return "Healthy""#, "string"),
            ("return 42", "number"),
            ("return true", "boolean"),
            ("return print", "function"),
        ] {
            assert_eq!(
                check(script).assess(&plain()),
                unknown(&format!(
                    "Lua health check t failed: expect table output from Lua script, not {t}"
                )),
                "{script}"
            );
        }
        still_works();
    }

    #[test]
    fn an_endless_loop_is_stopped_by_the_time_limit() {
        let spin = LuaCheck::new("example.com/Spinner", SPINNER).unwrap();
        let (a, took) = within_2_s(&spin);
        assert_eq!(
            a,
            unknown(
                "Lua health check example.com/Spinner was stopped: it ran past its time limit of 1 s"
            )
        );
        assert!(took >= TIME_LIMIT, "{took:?}");
        still_works();
        // Catching the limit's error does not keep a script running.
        for script in [
            "while true do pcall(function() while true do end end) end",
            "while true do xpcall(function() while true do end end, function() while true do end end) end",
            "while true do pcall(pcall, pcall, error, 'x') end",
            "error(setmetatable({}, {__tostring = function() while true do end end}))",
            "local ok, e = pcall(error, setmetatable({}, {__tostring = function() while true do end end}))
             return {status = tostring(e)}",
        ] {
            assert_eq!(
                within_2_s(&check(script)).0,
                unknown("Lua health check t was stopped: it ran past its time limit of 1 s"),
                "{script}"
            );
        }
        // A caught ordinary error is still the script's to handle.
        assert_eq!(
            check(
                r#"local ok, e = xpcall(function() error({code = 7}) end, function(e) return e.code * 6 end)
                   local ok2, e2 = xpcall(function() error("x") end, function(e) error("again") end)
                   return {status = "Healthy", message = tostring(ok) .. " " .. e .. " " .. tostring(ok2) .. " " .. e2}"#
            )
            .assess(&plain()),
            verdict(Health::Healthy, "false 42 false error in error handling")
        );
        assert_eq!(
            check(r#"local ok, e = pcall(error, "x", 0) return {status = "Healthy", message = tostring(ok) .. " " .. e}"#)
                .assess(&plain()),
            verdict(Health::Healthy, "false x")
        );
        still_works();
    }

    #[test]
    fn unbounded_allocation_is_stopped_by_the_memory_limit() {
        let memory = |origin: &str| {
            unknown(&format!(
                "Lua health check {origin} was stopped: it ran out of its memory limit of 64 MiB"
            ))
        };
        let hog = LuaCheck::new("example.com/Hog", HOG).unwrap();
        assert_eq!(hog.assess(&plain()), memory("example.com/Hog"));
        for script in [
            r#"return {status = string.rep("x", 2^30)}"#,
            r#"local s = "x" while true do s = s .. s end"#,
            "local t = {} for i = 1, 2^30 do t[i] = i end",
        ] {
            assert_eq!(check(script).assess(&plain()), memory("t"), "{script}");
        }
        // The same 1 KiB string made again is the one interned string (Lua 5.1): this grows a
        // table of references by 16 bytes a step, and whichever limit it meets stops it.
        let a = within_2_s(&check(
            r#"local t = {} while true do t[#t+1] = string.rep("x", 1024) end"#,
        ))
        .0
        .unwrap();
        assert_eq!(a.health, Health::Unknown);
        assert!(
            a.message.ends_with("its time limit of 1 s")
                || a.message.ends_with("its memory limit of 64 MiB"),
            "{}",
            a.message
        );
        still_works();
    }

    #[test]
    fn the_sandbox_holds_no_way_out() {
        let marker = "/tmp/driftless-lua-escaped";
        let _ = std::fs::remove_file(marker);
        assert_eq!(
            LuaCheck::new("example.com/Escaper", ESCAPER)
                .unwrap()
                .assess(&plain()),
            unknown(
                "Lua health check example.com/Escaper failed at line 2: attempt to call field 'execute' (a nil value)"
            )
        );
        assert!(!Path::new(marker).exists(), "os.execute ran");
        still_works();
        assert_eq!(
            LuaCheck::new("example.com/Snoop", SNOOP)
                .unwrap()
                .assess(&plain()),
            unknown(
                "Lua health check example.com/Snoop failed at line 2: attempt to index global 'io' (a nil value)"
            )
        );
        still_works();
        for (script, error) in [
            (
                r#"os.exit(1)"#,
                "attempt to call field 'exit' (a nil value)",
            ),
            (
                r#"os.remove("/tmp/x")"#,
                "attempt to call field 'remove' (a nil value)",
            ),
            (
                r#"os.getenv("HOME")"#,
                "attempt to call field 'getenv' (a nil value)",
            ),
            (
                r#"dofile("/etc/passwd")"#,
                "attempt to call global 'dofile' (a nil value)",
            ),
            (
                r#"loadfile("/etc/passwd")"#,
                "attempt to call global 'loadfile' (a nil value)",
            ),
            (
                r#"loadstring("return 1")"#,
                "attempt to call global 'loadstring' (a nil value)",
            ),
            (
                r#"load(function() return nil end)"#,
                "attempt to call global 'load' (a nil value)",
            ),
            (
                r#"setfenv(1, {})"#,
                "attempt to call global 'setfenv' (a nil value)",
            ),
            (
                r#"collectgarbage("stop")"#,
                "attempt to call global 'collectgarbage' (a nil value)",
            ),
            (
                r#"newproxy(true)"#,
                "attempt to call global 'newproxy' (a nil value)",
            ),
            (
                r#"string.dump(print)"#,
                "attempt to call field 'dump' (a nil value)",
            ),
            (
                r#"debug.getinfo(1)"#,
                "attempt to index global 'debug' (a nil value)",
            ),
            (
                r#"package.loadlib("x", "y")"#,
                "attempt to index global 'package' (a nil value)",
            ),
            (
                r#"coroutine.create(print)"#,
                "attempt to index global 'coroutine' (a nil value)",
            ),
            (
                r#"require("io")"#,
                "module 'io' not found: a health check may require only os, string, table and math",
            ),
            (
                r#"require("debug")"#,
                "module 'debug' not found: a health check may require only os, string, table and math",
            ),
        ] {
            assert_eq!(
                check(script).assess(&plain()),
                unknown(&format!("Lua health check t failed at line 1: {error}")),
                "{script}"
            );
        }
        still_works();
    }

    #[test]
    fn a_runtime_error_gives_its_first_line_without_a_traceback() {
        assert_eq!(
            LuaCheck::new("example.com/Boom", BOOM)
                .unwrap()
                .assess(&plain()),
            unknown("Lua health check example.com/Boom failed at line 2: boom: w1")
        );
        assert_eq!(
            check("error('boom')").assess(&plain()),
            unknown("Lua health check t failed at line 1: boom")
        );
        assert_eq!(
            check("error('first\\nsecond', 0)").assess(&plain()),
            unknown("Lua health check t failed: first")
        );
        assert_eq!(
            check("local x = nil\nreturn {status = x.y}").assess(&plain()),
            unknown(
                "Lua health check t failed at line 2: attempt to index local 'x' (a nil value)"
            )
        );
        // Lua cuts long chunk names; messages name the whole origin.
        let long = format!("/srv/{}/example.com/Widget/health.lua", "deep/".repeat(20));
        assert_eq!(
            LuaCheck::new(long.as_str(), "\nerror('boom')")
                .unwrap()
                .assess(&plain()),
            unknown(&format!("Lua health check {long} failed at line 2: boom"))
        );
        still_works();
    }

    #[test]
    fn a_secrets_error_is_not_shown() {
        let secret = Object::from_value(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"password": "U1VQRVJTRUNSRVQ="},
        }))
        .unwrap();
        let a = check("\nerror('password is ' .. obj.data.password)").assess(&secret);
        assert_eq!(
            a,
            unknown(
                "Lua health check t failed at line 2 (the error is not shown: it may quote this Secret's values)"
            )
        );
        // Nor a status of its values it returns.
        assert_eq!(
            check("return {status = obj.data.password}").assess(&secret),
            unknown("Lua health check t failed: Lua returned an invalid health status")
        );
        // Its verdicts are the script's own.
        assert_eq!(
            check(r#"return {status = "Healthy", message = "has " .. obj.metadata.name}"#)
                .assess(&secret),
            verdict(Health::Healthy, "has s")
        );
    }

    #[test]
    fn a_syntax_error_names_the_origin_and_line() {
        let e = LuaCheck::new(
            "example.com/Widget",
            "local hs = {}\nhs.status = = 1\nreturn hs",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "example.com/Widget:2: unexpected symbol near '='"
        );
        assert!(matches!(e, LuaError::Syntax { line: 2, .. }), "{e:?}");
        let path = data("lua-bad/example.com/Broken/health.lua");
        let e = LuaCheck::from_file(&path).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}:5: 'then' expected near 'hs'", path.display())
        );
        // A script is text: bytecode (which Lua 5.1 would run unchecked) is refused.
        let e = LuaCheck::new("t", "\x1bLua\x51\x00garbage").unwrap_err();
        assert!(
            e.to_string().contains("attempt to load a binary chunk"),
            "{e}"
        );
    }

    #[test]
    fn a_folder_in_argo_cds_layout_gives_exact_then_wildcard_checks() {
        let root = data("lua");
        let dir = LuaDir::load(&root).unwrap();
        assert_eq!(dir.len(), 2, "{dir:?}");
        let exact = dir.find("example.com", "Widget").unwrap();
        assert_eq!(
            exact.origin(),
            root.join("example.com/Widget/health.lua")
                .display()
                .to_string()
        );
        assert_eq!(exact.source(), WIDGET);
        let wild = dir.find("parts.example.org", "Sprocket").unwrap();
        assert_eq!(wild.source(), EXAMPLE_ORG);
        assert_eq!(
            wild.assess(
                &Object::from_value(
                    json!({"apiVersion": "parts.example.org/v1", "kind": "Sprocket",
                    "metadata": {"name": "s1"}, "status": {"phase": "Ready"}})
                )
                .unwrap()
            ),
            verdict(Health::Healthy, "Sprocket s1 is ready")
        );
        assert_eq!(
            wild.assess(
                &Object::from_value(
                    json!({"apiVersion": "parts.example.org/v1", "kind": "Sprocket",
                    "metadata": {"name": "s1"}})
                )
                .unwrap()
            ),
            None
        );
        assert!(dir.find("example.com", "Gizmo").is_none(), "actions/ only");
        assert!(
            dir.find("example.org", "Sprocket").is_none(),
            "`_.` needs a `.`"
        );
        assert!(dir.find("example.com", "Sprocket").is_none());
        assert!(dir.find("", "Widget").is_none());
    }

    #[test]
    fn core_kinds_wildcard_order_and_load_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let put = |rel: &str, text: &str| {
            let p = tmp.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        let ok = |m: &str| format!("return {{status = \"Healthy\", message = \"{m}\"}}");
        put("ConfigMap/health.lua", &ok("core"));
        put("ConfigMap/testdata/x.yaml", "");
        put("_/health.lua", &ok("any core kind"));
        put("_.example.org/_/health.lua", &ok("example.org"));
        put("_.org/_/health.lua", &ok("org"));
        put("_.org/Gear/health.lua", &ok("org gear"));
        put("a.example.org/Exact/health.lua", &ok("exact"));
        put(".hidden/Kind/health.lua", "this does not compile");
        put(
            "example.com/NoCheck/actions/restart/action.lua",
            "this does not compile",
        );
        let dir = LuaDir::load(tmp.path()).unwrap();
        assert_eq!(dir.len(), 6);
        let message = |group: &str, kind: &str| {
            let obj = plain();
            dir.find(group, kind)
                .and_then(|c| c.assess(&obj))
                .map(|a| a.message)
        };
        assert_eq!(message("", "ConfigMap").as_deref(), Some("core"));
        assert_eq!(message("", "Secret").as_deref(), Some("any core kind"));
        assert_eq!(message("a.example.org", "Exact").as_deref(), Some("exact"));
        // Sorted by path: `_.example.org/_` < `_.org/Gear` < `_.org/_`.
        assert_eq!(
            message("a.example.org", "Gear").as_deref(),
            Some("example.org")
        );
        assert_eq!(message("b.org", "Gear").as_deref(), Some("org gear"));
        assert_eq!(message("b.org", "Other").as_deref(), Some("org"));
        assert_eq!(message("example.com", "NoCheck"), None);
        assert_eq!(message("org", "Gear"), None);

        put("b.example.net/Bad/health.lua", "return {\n\n status = }");
        let e = LuaDir::load(tmp.path()).unwrap_err();
        let path = tmp.path().join("b.example.net/Bad/health.lua");
        assert_eq!(
            e.to_string(),
            format!("{}:3: unexpected symbol near '}}'", path.display())
        );
        assert!(
            matches!(&e, LuaError::Syntax { origin, line: 3, .. } if *origin == path.display().to_string())
        );
        let e = LuaDir::load(&tmp.path().join("absent")).unwrap_err();
        assert!(matches!(e, LuaError::Io { .. }), "{e:?}");
        let e = LuaDir::load(&data("lua-bad")).unwrap_err();
        assert!(matches!(e, LuaError::Syntax { line: 5, .. }), "{e:?}");
    }

    #[test]
    fn glob_matches_as_argo_cds_underscore_folders() {
        assert!(glob("_.crossplane.io", "ec2.aws.crossplane.io"));
        assert!(glob("_", "VPC"));
        assert!(glob("_", ""));
        assert!(glob("a_c_e", "abcde"));
        assert!(glob("a_c_e", "ace"));
        assert!(!glob("_.crossplane.io", "crossplane.io"));
        assert!(!glob("a_c", "abd"));
        assert!(matches_key(
            "_.crossplane.io/_",
            "ec2.aws.crossplane.io",
            "VPC"
        ));
        assert!(!matches_key("_.crossplane.io/_", "", "VPC"));
        assert!(!matches_key("_", "apps", "Deployment"));
    }

    #[test]
    fn checks_are_shared_across_threads() {
        fn shared<T: Clone + Send + Sync>() {}
        shared::<LuaCheck>();
        shared::<LuaDir>();
        let w = check(WIDGET);
        let obj = widget(
            json!({}),
            json!({"conditions": [{"type": "Ready", "status": "True", "message": "ok"}]}),
        );
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| assert_eq!(w.assess(&obj), verdict(Health::Healthy, "ok")));
            }
        });
    }

    #[test]
    fn finalizers_are_refused_so_nothing_runs_out_of_the_time_limits_reach() {
        let started = Instant::now();
        let a = check(
            "setmetatable({}, {__gc = function() while true do end end})\nreturn {status = \"Healthy\"}",
        )
        .assess(&plain())
        .unwrap();
        assert_eq!(a.health, Health::Unknown, "{}", a.message);
        assert!(a.message.contains("__gc is not allowed"), "{}", a.message);
        assert!(started.elapsed() < Duration::from_secs(2));
        // A metatable without `__gc` is fine.
        let ok = check(
            "local t = setmetatable({}, {__index = function() return \"Healthy\" end})\nreturn {status = t.anything}",
        )
        .assess(&plain())
        .unwrap();
        assert_eq!(ok.health, Health::Healthy);
    }

    #[test]
    fn patterns_match_only_strings_short_enough_to_finish_in_time() {
        let mut long = plain();
        let mut v = serde_json::to_value(&long).unwrap();
        v["status"] = serde_json::json!({"message": format!("a{}x ", " ".repeat(300_000))});
        long = Object::from_value(v).unwrap();
        let started = Instant::now();
        let a = check(
            "local m = obj.status.message:match(\"^%s*(.-)%s*$\")\nreturn {status = \"Healthy\", message = m}",
        )
        .assess(&long)
        .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(a.health, Health::Unknown);
        assert!(a.message.contains("at most 8192 bytes"), "{}", a.message);
        // A plain find has no limit; a short subject matches as usual.
        let ok = check(
            "assert(string.find(obj.status.message, \"x \", 1, true))\nreturn {status = \"Healthy\", message = (\"  ok  \"):match(\"^%s*(.-)%s*$\")}",
        )
        .assess(&long)
        .unwrap();
        assert_eq!((ok.health, ok.message.as_str()), (Health::Healthy, "ok"));
    }

    #[test]
    fn messages_are_cut_and_lose_control_characters() {
        let a = check("return {status = \"Degraded\", message = \"\\27[31mred\\nforged line\" .. string.rep(\"x\", 10000)}")
            .assess(&plain())
            .unwrap();
        assert!(
            a.message.starts_with(" [31mred\nforged line"),
            "{}",
            &a.message[..40]
        );
        assert!(a.message.len() <= MAX_MESSAGE_BYTES + 3 && a.message.ends_with("..."));
    }

    #[test]
    fn a_device_or_a_fifo_is_not_read_as_a_script() {
        let e = LuaCheck::from_file(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}
