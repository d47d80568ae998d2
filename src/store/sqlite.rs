//! The embedded default store: one SQLite file in WAL mode.
//!
//! Tables: `objects` (one row per object: key, revision of its last write, JSON body; a
//! record of [`COMPRESS_FROM`] bytes or more, such as an app's inventory, as the gzip of its
//! JSON, a BLOB),
//! `change_sets` (the change log: one row per transaction, keyed by its revision, holding the
//! keys it changed in order, [`ChangeLog`]), `changes` (a view of it, one row per change, as
//! an earlier version kept the log) and `meta` (the current revision and the compaction
//! point). A transaction of
//! the store is one SQLite `BEGIN IMMEDIATE` transaction, so a sync's writes land together and
//! compare-and-swap holds across processes: `driftless store put` from another process is an
//! ordinary writer. The change feed looks at `PRAGMA data_version` (a cheap counter that moves
//! when another connection commits) and reads the change log only when it moved. It looks when
//! a file in the store's folder is written (Linux inotify: every commit writes the WAL), and
//! every 100 ms besides; where it cannot be woken, every `poll_interval`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tokio::sync::mpsc;

use super::checkpoint::Checkpointer;
use super::{
    Committed, Distinct, Error, Event, Listing, Precondition, Result, Selector, Store, Stored,
    Watch, WatchItem, Write, check_distinct, decode, stamp_of, stamp_record,
};
use crate::object::{Object, ObjectKey};

/// Tuning of a SQLite store.
#[derive(Clone, Debug)]
pub struct Options {
    /// How often a watch looks for new changes when it cannot be woken by the file system
    /// (default 10 ms; on Linux a watch is woken by every write and looks every 100 ms
    /// besides). Each look is one `PRAGMA data_version` unless something changed.
    pub poll_interval: Duration,
    /// How many revisions of change log to keep (default 10,000). A watch from an older
    /// revision gets [`WatchItem::Relist`].
    pub retain_revisions: u64,
    /// How long a writer waits for another process's transaction (default 10 s).
    pub busy_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_millis(10),
            retain_revisions: 10_000,
            busy_timeout: Duration::from_secs(10),
        }
    }
}

/// A store in one SQLite file. Cloning gives another handle on the same connection.
#[derive(Clone)]
pub struct SqliteStore {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
    opts: Options,
    /// The records this store wrote last ([`Heads`]); locked inside the connection's lock.
    heads: Arc<Mutex<Heads>>,
    /// Checkpoints of the write-ahead log, off the commit path.
    checkpoints: Arc<Checkpointer>,
}

/// The store-managed metadata of each record this store wrote, by key: (resourceVersion,
/// `creationTimestamp`, `generation`), what the next write of the record keeps
/// ([`stamp_record`]). Trusted only while the row's version is still that one (another
/// process may have written the record since); else read from the row ([`read_record_meta`]).
/// Reading them from the row costs the whole record: SQLite loads a value's every overflow page
/// to extract a field, and an app's status record is megabytes (at 100,000 objects, 19 MB
/// loaded at each status write, the peak of a cold sync).
type Heads = HashMap<ObjectKey, (u64, RecordMeta)>;

/// What the commit loop gives back: what was stored, how many writes took effect, and the
/// records written with their [`RecordMeta`].
type Written = (Vec<Stored>, i64, Vec<(ObjectKey, RecordMeta)>);

/// A record's store metadata that a write keeps: (`creationTimestamp`, `generation`), what
/// [`stamp_record`] takes.
type RecordMeta = (Option<String>, Option<u64>);

fn backend(op: &'static str) -> impl FnOnce(rusqlite::Error) -> Error {
    move |e| Error::Backend {
        op,
        source: Box::new(e),
    }
}

/// The tables. `objects` is an ordinary (rowid) table with a unique index on the key, not a
/// `WITHOUT ROWID` table keyed by it: there, a row is a cell of the key's b-tree, and SQLite
/// reads a cell's whole value to compare a key with it when the value overflows its page
/// (`sqlite3BtreeIndexMoveto`). An app's inventory and status records are megabytes, so each
/// lookup of a key near them read megabytes: 5 ms for three record versions at 10,000 objects,
/// a seventh of a new process's no-op. SQLite advises against rows larger than a twentieth of a
/// page there (<https://sqlite.org/withoutrowid.html#when_to_use_without_rowid>), and declared
/// objects (a CRD: hundreds of KB) overflow too. Here the index holds only keys.
///
/// The change log is one row per transaction (`change_sets`: its revision, and the JSON array
/// of the `[grp, kind, ns, name, deleted]` it changed, in order): a row per change was a
/// second insert per object, 10 ms of a cold sync of 10,000 objects (issue 18). `changes` is a
/// view of it with the columns of the table an earlier version kept: that version's watch
/// reads it as before, and its writes fail loudly (SQLite refuses to modify a view) rather
/// than go where no watch of this version looks.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS objects (
    grp TEXT NOT NULL, kind TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
    rev INTEGER NOT NULL, body TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS objects_key ON objects (grp, kind, ns, name);
CREATE TABLE IF NOT EXISTS change_sets (rev INTEGER PRIMARY KEY, keys TEXT NOT NULL);
CREATE VIEW IF NOT EXISTS changes (rev, seq, grp, kind, ns, name, deleted) AS
    SELECT s.rev, j.key, j.value ->> 0, j.value ->> 1, j.value ->> 2, j.value ->> 3, j.value ->> 4
    FROM change_sets AS s, json_each(s.keys) AS j;
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL) WITHOUT ROWID;
";

fn connect(path: &Path, opts: &Options) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(opts.busy_timeout)?;
    // Switching to WAL takes an exclusive lock and does not wait on the busy handler, so only
    // switch when needed (the mode is stored in the file).
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    }
    conn.execute_batch("PRAGMA synchronous=NORMAL;")?;
    Ok(conn)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// True when `objects` is in an earlier version's layout: a `WITHOUT ROWID` table keyed by the
/// object's key ([`prepare_schema`] moves it).
fn without_rowid(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'objects' AND sql LIKE '%WITHOUT ROWID%'",
        [],
        |r| r.get::<_, i64>(0).map(|n| n > 0),
    )
}

/// Makes the [`SCHEMA`]'s tables in one `IMMEDIATE` transaction (waiting for the write lock up
/// to the busy timeout), looking again under the lock (another process may have done it): the
/// missing ones created, and an earlier version's parts moved into the current layout, rows
/// and all (renamed aside, the new table made, the rows copied, the old one dropped):
/// `objects` keyed `WITHOUT ROWID` ([`without_rowid`]), and a change log of one row per change
/// ([`log_by_row`]), whose rows become one set per revision, in their order. The revision is
/// untouched.
fn prepare_schema(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let earlier = without_rowid(&tx)?;
    let by_row = log_by_row(&tx)?;
    if earlier {
        tx.execute_batch("ALTER TABLE objects RENAME TO objects_without_rowid;")?;
    }
    if by_row {
        tx.execute_batch("ALTER TABLE changes RENAME TO changes_by_row;")?;
    }
    tx.execute_batch(SCHEMA)?;
    if earlier {
        tx.execute_batch(
            "INSERT INTO objects (grp, kind, ns, name, rev, body)
                 SELECT grp, kind, ns, name, rev, body FROM objects_without_rowid;
             DROP TABLE objects_without_rowid;",
        )?;
    }
    if by_row {
        tx.execute_batch(
            "INSERT INTO change_sets (rev, keys)
                 SELECT rev, json_group_array(json_array(grp, kind, ns, name, deleted) ORDER BY seq)
                 FROM changes_by_row GROUP BY rev;
             DROP TABLE changes_by_row;",
        )?;
    }
    tx.commit()
}

/// Moves a store in an earlier version's layout into the current one ([`prepare_schema`]) if
/// that can be done now: without waiting for another process's write lock, and where the file
/// can grow by about its size. Otherwise the store is used as it is, which works (the same
/// statements; only lookups near large records are slower), and moved at a later open: a read
/// must not fail, nor wait, for want of a migration.
fn move_layout(conn: &mut Connection, opts: &Options) {
    let moved = conn
        .busy_timeout(Duration::ZERO)
        .and_then(|()| prepare_schema(conn));
    if let Err(e) = conn.busy_timeout(opts.busy_timeout) {
        tracing::warn!(error = %e, "Cannot set the store's busy timeout again");
    }
    match moved {
        Ok(()) => tracing::info!("The store was moved into the current layout"),
        Err(e) if is_busy(&e) => tracing::info!(
            "The store keeps its earlier layout for now: another process holds its write lock (moved at a later open)"
        ),
        Err(e) => tracing::warn!(
            error = %e,
            "The store keeps its earlier layout for now (moving it needs the write lock and about the store's size of free disk; moved at a later open)"
        ),
    }
}

/// What a store file holds of the [`SCHEMA`].
#[derive(Debug, PartialEq)]
enum Layout {
    /// Every part, as [`SCHEMA`] makes it.
    Current,
    /// Every part, some as an earlier version made them (`objects` keyed `WITHOUT ROWID`
    /// ([`without_rowid`]), the change log a table of one row per change): used as it is,
    /// until moved.
    Earlier,
    /// A new file, or one missing a part.
    Incomplete,
}

/// The file's [`Layout`], from `sqlite_master`.
fn layout(conn: &Connection) -> rusqlite::Result<Layout> {
    let mut stmt = conn.prepare(
        "SELECT type, name, coalesce(sql, '') FROM sqlite_master WHERE name IN ('objects', 'objects_key', 'meta', 'changes', 'change_sets')",
    )?;
    let parts = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let has = |kind: &str, name: &str| parts.iter().any(|(t, n, _)| t == kind && n == name);
    let objects_earlier = parts
        .iter()
        .any(|(t, n, sql)| t == "table" && n == "objects" && sql.contains("WITHOUT ROWID"));
    let objects = has("table", "objects") && (objects_earlier || has("index", "objects_key"));
    let log_earlier = has("table", "changes");
    let log = log_earlier || (has("table", "change_sets") && has("view", "changes"));
    Ok(if !(objects && log && has("table", "meta")) {
        Layout::Incomplete
    } else if objects_earlier || log_earlier {
        Layout::Earlier
    } else {
        Layout::Current
    })
}

/// True when the change log is an earlier version's table of one row per change (not yet
/// moved by [`prepare_schema`]): the transaction writes its changes there.
fn log_by_row(conn: &Connection) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'changes'",
    )?
    .query_row([], |r| r.get::<_, i64>(0).map(|n| n > 0))
}

/// Opens the file and creates the tables, retrying while another process holds the lock (two
/// processes opening a new store at once), up to the busy timeout; an earlier version's layout
/// is moved into the current one when that can be done at once ([`move_layout`]).
fn open_and_prepare(path: &Path, opts: &Options) -> rusqlite::Result<Connection> {
    let deadline = std::time::Instant::now() + opts.busy_timeout;
    loop {
        let attempt = connect(path, opts).and_then(|mut conn| {
            match layout(&conn)? {
                Layout::Current => {}
                // Every part there, some in an earlier layout: it works as it is (the same
                // statements; the change log is written as it is kept), so it is moved only
                // when that can be done now.
                Layout::Earlier => move_layout(&mut conn, opts),
                // A new store (or one missing a part): made, waiting for the write lock.
                Layout::Incomplete => prepare_schema(&mut conn)?,
            }
            Ok(conn)
        });
        match attempt {
            Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(25));
            }
            other => return other,
        }
    }
}

fn meta(conn: &Connection, k: &str) -> rusqlite::Result<u64> {
    conn.prepare_cached("SELECT v FROM meta WHERE k = ?1")?
        .query_row([k], |r| r.get::<_, i64>(0))
        .optional()
        .map(|v| v.unwrap_or(0) as u64)
}

fn read_one(conn: &Connection, key: &ObjectKey) -> Result<Option<Object>> {
    read_body(conn, key)?.map(|b| decode(key, &b)).transpose()
}

/// The stored JSON of `key`, not decoded (expanded when kept as a gzip: [`body_text`]).
fn read_body(conn: &Connection, key: &ObjectKey) -> Result<Option<String>> {
    conn.prepare_cached(
        "SELECT body FROM objects WHERE grp = ?1 AND kind = ?2 AND ns = ?3 AND name = ?4",
    )
    .and_then(|mut s| {
        s.query_row(
            params![key.group(), key.kind(), key.namespace(), key.name()],
            |r| Ok(body_text(key, r.get_ref(0)?)),
        )
        .optional()
    })
    .map_err(backend("get"))?
    .transpose()
}

/// Records (the reserved group's: an app's inventory and status, the ownership index) whose
/// JSON is this many bytes or more are kept as its gzip, a BLOB: they repeat their field names
/// and values, and shrink ten to thirty times, so a sync of 10,000 objects writes (and its
/// checkpoint copies and syncs) about 5 MB less (issue 18). Smaller ones stay JSON text, as
/// every object does, readable with `sqlite3`; a gzip reads with `gunzip`.
pub const COMPRESS_FROM: usize = 16 * 1024;

/// The gzip level of a compressed record: the fastest (`flate2` 1), which already gives most
/// of the size (an inventory of 10,000 objects: 3.2 MB of JSON, 0.11 MB at level 1, 0.10 at 6,
/// in three times the time).
const GZIP_LEVEL: u32 = 1;

/// Most bytes a stored gzip may expand to: SQLite's own limit on a text or BLOB (its default
/// `SQLITE_MAX_LENGTH`, <https://sqlite.org/limits.html>), so nothing read is longer than a
/// text the store could hold.
const MAX_BODY: u64 = 1_000_000_000;

/// A row's body as JSON text: the text as stored, or a record's gzip expanded.
///
/// # Errors
///
/// [`Error::Corrupt`] naming `key` when the text is not UTF-8, the gzip does not expand to
/// UTF-8 text of at most [`MAX_BODY`] bytes, or the column holds neither.
fn body_text(key: &ObjectKey, value: rusqlite::types::ValueRef<'_>) -> Result<String> {
    use rusqlite::types::ValueRef;
    let corrupt = |why: String| Error::Corrupt {
        key: key.clone(),
        source: why.into(),
    };
    match value {
        ValueRef::Text(text) => std::str::from_utf8(text)
            .map(str::to_owned)
            .map_err(|e| corrupt(format!("the stored text is not UTF-8: {e}"))),
        ValueRef::Blob(gz) => super::gzip::expand(gz, MAX_BODY).map_err(corrupt),
        other => Err(corrupt(format!(
            "the stored body is {:?}, not text",
            other.data_type()
        ))),
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store file at `path`. The parent directory must exist.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the file cannot be opened or is not a driftless store.
    pub fn open(path: &Path, opts: Options) -> Result<Self> {
        let mut conn = open_and_prepare(path, &opts).map_err(backend("open"))?;
        let checkpoints = Arc::new(Checkpointer::new(path));
        checkpoints.hook(&mut conn).map_err(backend("open"))?;
        Ok(Self {
            path: path.to_path_buf(),
            conn: Arc::new(Mutex::new(conn)),
            opts,
            heads: Arc::default(),
            checkpoints,
        })
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the connection in the blocking pool.
    async fn with_conn<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let conn = self.conn.clone();
        let span = tracing::debug_span!("sqlite", op);
        tokio::task::spawn_blocking(move || {
            let _span = span.entered();
            let mut guard = conn.lock().map_err(|_| Error::Backend {
                op,
                source: "sqlite connection lock poisoned".into(),
            })?;
            f(&mut guard)
        })
        .await
        .map_err(|e| Error::Backend {
            op,
            source: Box::new(e),
        })?
    }
}

/// The resourceVersion of the row under `key`, without reading its value; `None` when absent.
/// `op` names the operation in a backend error.
fn read_rev(c: &Connection, key: &ObjectKey, op: &'static str) -> Result<Option<u64>> {
    c.prepare_cached(
        "SELECT rev FROM objects WHERE grp = ?1 AND kind = ?2 AND ns = ?3 AND name = ?4",
    )
    .and_then(|mut s| {
        s.query_row(
            params![key.group(), key.kind(), key.namespace(), key.name()],
            |r| r.get::<_, i64>(0),
        )
        .optional()
    })
    .map(|rev| rev.map(|r| r as u64))
    .map_err(backend(op))
}

/// A record's version and, when its text is JSON, its `creationTimestamp` and `generation`
/// (read by SQLite's `json_extract`, without decoding the rest; from the expanded text of one
/// kept as a gzip): for [`stamp_record`].
fn read_record_meta(c: &Connection, key: &ObjectKey) -> Result<(Option<u64>, Option<RecordMeta>)> {
    let meta = c
        .prepare_cached(
            "SELECT rev, json_extract(body, '$.metadata.creationTimestamp'), json_extract(body, '$.metadata.generation'), NULL FROM objects WHERE grp = ?1 AND kind = ?2 AND ns = ?3 AND name = ?4 AND typeof(body) = 'text'
             UNION ALL
             SELECT rev, NULL, NULL, body FROM objects WHERE grp = ?1 AND kind = ?2 AND ns = ?3 AND name = ?4 AND typeof(body) = 'blob'",
        )
        .and_then(|mut s| {
            s.query_row(params![key.group(), key.kind(), key.namespace(), key.name()], |r| {
                let rev = r.get::<_, i64>(0)? as u64;
                if let rusqlite::types::ValueRef::Blob(_) = r.get_ref(3)? {
                    // Kept as a gzip: its head, from the expanded text.
                    let head = body_text(key, r.get_ref(3)?)
                        .ok()
                        .and_then(|text| super::record_meta_of(&text));
                    return Ok(match head {
                        Some((created, generation)) => (rev, created, generation),
                        None => (rev, None, None),
                    });
                }
                Ok((
                    rev,
                    r.get::<_, Option<String>>(1).ok().flatten(),
                    r.get::<_, Option<i64>>(2)
                        .ok()
                        .flatten()
                        .and_then(|g| u64::try_from(g).ok()),
                ))
            })
            .optional()
        });
    match meta {
        Ok(found) => Ok(match found {
            Some((rev, created, generation)) => (Some(rev), Some((created, generation))),
            None => (None, None),
        }),
        // A record whose text is not JSON (damaged): only its version.
        Err(_) => Ok((read_rev(c, key, "commit")?, None)),
    }
}

/// A write as the commit loop takes it: a create with its stored text already made (on the
/// serializing thread, [`commit_blocking`]), a large record with the gzip of its own fields
/// already made (the head, which the transaction's read stamps, is compressed in the loop:
/// [`super::RecordText::gzip_after_head`]), or any other write, made in the loop from what
/// the transaction reads.
enum Prepared {
    Create {
        key: ObjectKey,
        object: Object,
        stamp: super::Stamp,
        body: String,
    },
    Record {
        key: ObjectKey,
        record: super::RecordText,
        precondition: Precondition,
        after_head: Vec<u8>,
    },
    Other(ObjectKey, Write),
}

/// A row's body as the commit loop writes it: JSON text (compressed there when a record's is
/// [`COMPRESS_FROM`] bytes or more), or a record's gzip made already.
enum Body {
    Text(String),
    Gzip(Vec<u8>),
}

/// Commits at or above this many writes serialize their creates on a second thread while this
/// one inserts (fewer: a thread would cost more than it saves).
const SERIALIZE_APART: usize = 256;

/// Creates handed from the serializing thread to the inserting one at a time.
const SERIALIZE_BATCH: usize = 128;

fn commit_blocking(
    conn: &mut Connection,
    writes: Vec<Write>,
    retain: u64,
    heads: &mut Heads,
) -> Result<Committed> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(backend("commit"))?;
    let current = meta(&tx, "revision").map_err(backend("commit"))?;
    let revision = current + 1;
    // A create's text depends only on the object and the revision (nothing is there to read:
    // its insert refuses a row that is there), so it is made apart from the inserts.
    // `made`: a large record's compressed fields, when made already (`Some(None)`: no fields).
    let prepare = move |(key, w): (ObjectKey, Write), made: Option<Option<Vec<u8>>>| match w {
        Write::Put {
            object,
            precondition: Precondition::Absent,
            json,
        } if !key.is_reserved() => {
            let stamp = stamp_of(None, &object, Some(revision));
            let body = match &json {
                Some(json) => stamp.text_from(&object, json),
                None => stamp.text(&object),
            };
            Prepared::Create {
                key,
                object,
                stamp,
                body,
            }
        }
        // A large record's fields (an inventory: megabytes at 10,000 objects) are compressed
        // here, beside the inserts, rather than by the inserting thread once it reaches them.
        Write::PutRecord {
            record,
            precondition,
        } if record.len() >= COMPRESS_FROM => {
            match made.unwrap_or_else(|| record.gzip_after_head(GZIP_LEVEL)) {
                Some(after_head) => Prepared::Record {
                    key,
                    record,
                    precondition,
                    after_head,
                },
                None => Prepared::Other(
                    key,
                    Write::PutRecord {
                        record,
                        precondition,
                    },
                ),
            }
        }
        w => Prepared::Other(key, w),
    };
    let count = writes.len();
    let many = count >= SERIALIZE_APART;
    std::thread::scope(|scope| {
        let writes: Box<dyn Iterator<Item = Result<Prepared>>> = if many {
            // Handed over a batch at a time: one at a time, the two threads woke each other
            // (a futex call) about once per write.
            // Each write's key is read, and found distinct, on this thread too: the inserting
            // one starts at once, and a second write of a key fails the commit when the loop
            // meets it (nothing of the transaction is kept).
            let (send, receive) = std::sync::mpsc::sync_channel::<Vec<Result<Prepared>>>(4);
            // Large records' fields (an inventory: megabytes at 10,000 objects) compressed on
            // a thread of their own from the start, beside the creates' texts: made in turn
            // (the inventory comes last), the inserting thread waited for them at the end.
            let mut early: Vec<(usize, std::thread::ScopedJoinHandle<'_, Option<Vec<u8>>>)> =
                Vec::new();
            for (i, w) in writes.iter().enumerate() {
                if let Write::PutRecord { record, .. } = w
                    && record.len() >= COMPRESS_FROM
                {
                    let record = record.clone();
                    let span = tracing::debug_span!("sqlite_gzip", bytes = record.len());
                    let started = std::thread::Builder::new()
                        .name("sqlite-gzip".into())
                        .spawn_scoped(scope, move || {
                            let _span = span.entered();
                            record.gzip_after_head(GZIP_LEVEL)
                        });
                    // Not started: made in turn.
                    if let Ok(handle) = started {
                        early.push((i, handle));
                    }
                }
            }
            let span = tracing::debug_span!("sqlite_serialize", writes = writes.len());
            let started = std::thread::Builder::new()
                .name("sqlite-serialize".into())
                .spawn_scoped(scope, move || {
                    let _span = span.entered();
                    let mut seen = Distinct::with_capacity(writes.len());
                    let mut writes = writes.into_iter().enumerate().peekable();
                    let mut early = early.into_iter().peekable();
                    while writes.peek().is_some() {
                        let batch: Vec<Result<Prepared>> = writes
                            .by_ref()
                            .take(SERIALIZE_BATCH)
                            .map(|(i, w)| {
                                let key = seen.add(&w)?;
                                // A thread that failed leaves it to be made here.
                                let made = early
                                    .next_if(|(at, _)| *at == i)
                                    .and_then(|(_, handle)| handle.join().ok());
                                Ok(prepare((key, w), made))
                            })
                            .collect();
                        // The loop stopped (an error): nothing more to make.
                        if send.send(batch).is_err() {
                            break;
                        }
                    }
                });
            match started {
                Ok(_) => Box::new(receive.into_iter().flatten()),
                Err(e) => {
                    return Err(Error::Backend {
                        op: "commit",
                        source: Box::new(e),
                    });
                }
            }
        } else {
            let keys = check_distinct(&writes)?;
            Box::new(
                keys.into_iter()
                    .zip(writes)
                    .map(move |kw| Ok(prepare(kw, None))),
            )
        };
        commit_writes(&tx, writes, count, revision, heads)
    })
    .and_then(|(stored, seq, written)| {
        let committed = finish_commit(tx, revision, stored, seq, retain)?;
        // Committed: the records' metadata as written is the row's from now on.
        for (key, meta) in written {
            heads.insert(key, (revision, meta));
        }
        Ok(committed)
    })
}

/// [`read_record_meta`], from `heads` when it holds the row's current version.
fn record_meta(
    tx: &rusqlite::Transaction<'_>,
    key: &ObjectKey,
    heads: &Heads,
) -> Result<(Option<u64>, Option<RecordMeta>)> {
    if let Some((rev, meta)) = heads.get(key)
        && read_rev(tx, key, "commit")? == Some(*rev)
    {
        return Ok((Some(*rev), Some(meta.clone())));
    }
    read_record_meta(tx, key)
}

/// A record's [`RecordMeta`] as stamped, to keep in [`Heads`].
fn head_meta(key: &ObjectKey, head: &Object) -> (ObjectKey, RecordMeta) {
    let meta = head.metadata();
    (
        key.clone(),
        (
            meta.get("creationTimestamp")
                .and_then(serde_json::Value::as_str)
                .map(str::to_string),
            meta.get("generation").and_then(serde_json::Value::as_u64),
        ),
    )
}

/// The commit loop: every write inserted (or deleted) in order, each checked against its
/// precondition, with its change recorded; (what was stored, how many took effect, the
/// records written with their metadata for [`Heads`]). `count`: how many writes there are (the
/// list of what was stored is made that long at once: grown by doubling, it was copied 14
/// times at 10,000 objects, on the thread that bounds the commit).
fn commit_writes(
    tx: &rusqlite::Transaction<'_>,
    writes: impl Iterator<Item = Result<Prepared>>,
    count: usize,
    revision: u64,
    heads: &Heads,
) -> Result<Written> {
    let mut stored = Vec::with_capacity(count);
    let mut written = Vec::new();
    let mut seq = 0i64;
    // Held for the whole loop: taking them from rusqlite's statement cache at each row hashed
    // the SQL text twice per object.
    let mut create_stmt = tx.prepare_cached(CREATE_SQL).map_err(backend("commit"))?;
    let mut replace_stmt = tx.prepare_cached(REPLACE_SQL).map_err(backend("commit"))?;
    let mut creates = Creates::new(tx)?;
    let mut log = ChangeLog::new(tx)?;
    for w in writes {
        let (key, create, new, body) = match w? {
            Prepared::Create {
                key,
                object,
                stamp,
                body,
            } => (key, true, Stored::stamped(object, stamp), Body::Text(body)),
            Prepared::Record {
                key,
                record,
                precondition,
                after_head,
            } => {
                // As a record below, its text the gzip of the stamped head's, then the fields'.
                let (rev, meta) = record_meta(tx, &key, heads)?;
                precondition.check_version(&key, rev)?;
                let head = stamp_record(meta, record.head(), revision);
                written.push(head_meta(&key, &head));
                let body = match super::RecordText::head_before_fields(&head) {
                    Some(front) => {
                        let mut gz = super::gzip::compress(front.as_bytes(), GZIP_LEVEL);
                        gz.extend_from_slice(&after_head);
                        Body::Gzip(gz)
                    }
                    // As `RecordText::into_text`: the head alone.
                    None => Body::Text(head.to_json()),
                };
                (key, false, Stored::from(head), body)
            }
            Prepared::Other(key, w) => {
                let (new, body) = match w {
                    Write::Delete { precondition, .. } => {
                        // Only the version is read: a record whose value does not parse can
                        // still go.
                        let old = read_rev(tx, &key, "commit")?;
                        precondition.check_version(&key, old)?;
                        if old.is_none() {
                            continue;
                        }
                        tx.prepare_cached(
                            "DELETE FROM objects WHERE grp = ?1 AND kind = ?2 AND ns = ?3 AND name = ?4",
                        )
                        .and_then(|mut s| {
                            s.execute(params![
                                key.group(),
                                key.kind(),
                                key.namespace(),
                                key.name()
                            ])
                        })
                        .map_err(backend("commit"))?;
                        log.record(revision, seq, &key, true)?;
                        seq += 1;
                        continue;
                    }
                    Write::PutRecord {
                        record,
                        precondition,
                    } => {
                        // The stamped head, then the record's own fields as given.
                        let (rev, meta) = record_meta(tx, &key, heads)?;
                        precondition.check_version(&key, rev)?;
                        let head = stamp_record(meta, record.head(), revision);
                        written.push(head_meta(&key, &head));
                        let body = record.into_text(&head);
                        (Stored::from(head), body)
                    }
                    Write::Put {
                        object,
                        precondition,
                        ..
                    } if key.is_reserved() => {
                        // A record: its old metadata only, read by SQLite from the text.
                        let (rev, meta) = record_meta(tx, &key, heads)?;
                        precondition.check_version(&key, rev)?;
                        let new = stamp_record(meta, object, revision);
                        written.push(head_meta(&key, &new));
                        let body = new.to_json();
                        (Stored::from(new), body)
                    }
                    Write::Put {
                        object,
                        precondition,
                        json,
                    } => {
                        let old = read_one(tx, &key)?;
                        precondition.check(&key, old.as_ref())?;
                        // Written from the object in place: no stamped copy of it is built.
                        let stamp = stamp_of(old.as_ref(), &object, Some(revision));
                        let body = match &json {
                            Some(json) => stamp.text_from(&object, json),
                            None => stamp.text(&object),
                        };
                        (Stored::stamped(object, stamp), body)
                    }
                };
                (key, false, new, Body::Text(body))
            }
        };
        let body = match body {
            // An object's create: inserted with others, in the order given.
            Body::Text(text) if create && text.len() < BIND_IN_PLACE => {
                creates.add(tx, &mut create_stmt, revision, key.clone(), text)?;
                log.record(revision, seq, &key, false)?;
                stored.push(new.with_key(key));
                seq += 1;
                continue;
            }
            body => body,
        };
        // What is waiting goes first: every write takes effect in the order given.
        creates.flush(tx, &mut create_stmt, revision)?;
        let (insert, stmt) = if create {
            (CREATE_SQL, &mut create_stmt)
        } else {
            (REPLACE_SQL, &mut replace_stmt)
        };
        let execute = |stmt: &mut rusqlite::CachedStatement<'_>, stored| {
            stmt.execute(params![
                key.group(),
                key.kind(),
                key.namespace(),
                key.name(),
                revision as i64,
                stored
            ])
        };
        let inserted = match body {
            Body::Gzip(gz) => execute(stmt, rusqlite::types::Value::Blob(gz)),
            Body::Text(body) => {
                let compress = key.is_reserved() && body.len() >= COMPRESS_FROM;
                if !compress && body.len() >= BIND_IN_PLACE {
                    insert_in_place(tx, insert, &key, revision as i64, &body)
                } else {
                    // The text, or a large record's gzip in its place.
                    let stored = if compress {
                        rusqlite::types::Value::Blob(super::gzip::compress(
                            body.as_bytes(),
                            GZIP_LEVEL,
                        ))
                    } else {
                        rusqlite::types::Value::Text(body)
                    };
                    execute(stmt, stored)
                }
            }
        };
        if let Err(e) = inserted {
            if create && e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) {
                // Created by someone else since the caller looked: the precondition's conflict.
                Precondition::Absent.check_version(&key, read_rev(tx, &key, "commit")?)?;
            }
            return Err(backend("commit")(e));
        }
        log.record(revision, seq, &key, false)?;
        stored.push(new.with_key(key));
        seq += 1;
    }
    creates.flush(tx, &mut create_stmt, revision)?;
    log.finish(tx, revision)?;
    Ok((stored, seq, written))
}

/// Objects created per insert statement ([`Creates`]).
const CREATES_PER_INSERT: usize = 64;

/// Creates inserted [`CREATES_PER_INSERT`] rows to a statement (`INSERT ... VALUES (...),
/// (...)`), the rest one by one. Within one statement SQLite keeps its cursors open between
/// rows instead of preparing, binding and resetting a statement per object: the inserting
/// thread, which bounds a cold sync's commit, runs 23% fewer instructions at 10,000 objects.
/// (The index's key comparisons stay most of an insert: `sqlite3BtreeIndexMoveto`'s shortcut
/// for a key past the last one applies to few of these rows.) A key already there fails the
/// whole statement (none of its rows stay), which is then told as that key's conflict.
struct Creates<'t> {
    many: rusqlite::CachedStatement<'t>,
    waiting: Vec<(ObjectKey, String)>,
}

impl<'t> Creates<'t> {
    fn new(tx: &'t rusqlite::Transaction<'_>) -> Result<Self> {
        static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let sql = SQL.get_or_init(|| {
            let row = "(?, ?, ?, ?, ?, ?)";
            format!(
                "INSERT INTO objects (grp, kind, ns, name, rev, body) VALUES {}",
                vec![row; CREATES_PER_INSERT].join(", ")
            )
        });
        Ok(Creates {
            many: tx.prepare_cached(sql).map_err(backend("commit"))?,
            waiting: Vec::with_capacity(CREATES_PER_INSERT),
        })
    }

    /// Adds the create of `key` with its text; inserts the waiting ones once there are enough.
    fn add(
        &mut self,
        tx: &rusqlite::Transaction<'_>,
        one: &mut rusqlite::CachedStatement<'_>,
        revision: u64,
        key: ObjectKey,
        text: String,
    ) -> Result<()> {
        self.waiting.push((key, text));
        if self.waiting.len() == CREATES_PER_INSERT {
            self.flush(tx, one, revision)?;
        }
        Ok(())
    }

    /// Inserts the waiting creates: a full set in one statement, fewer one by one (`one`:
    /// the single-row insert, [`CREATE_SQL`]).
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] naming a key already there ([`Precondition::Absent`]); the
    /// backend's error otherwise.
    fn flush(
        &mut self,
        tx: &rusqlite::Transaction<'_>,
        one: &mut rusqlite::CachedStatement<'_>,
        revision: u64,
    ) -> Result<()> {
        if self.waiting.is_empty() {
            return Ok(());
        }
        let waiting = std::mem::take(&mut self.waiting);
        let rev = revision as i64;
        // The keys that may have failed: a failed statement leaves none of its rows.
        let mut tried: &[(ObjectKey, String)] = &waiting;
        let inserted = if waiting.len() == CREATES_PER_INSERT {
            let stmt = &mut self.many;
            let mut bound = Ok(());
            for (i, (key, text)) in waiting.iter().enumerate() {
                let at = i * 6;
                bound = bound
                    .and_then(|()| stmt.raw_bind_parameter(at + 1, key.group()))
                    .and_then(|()| stmt.raw_bind_parameter(at + 2, key.kind()))
                    .and_then(|()| stmt.raw_bind_parameter(at + 3, key.namespace()))
                    .and_then(|()| stmt.raw_bind_parameter(at + 4, key.name()))
                    .and_then(|()| stmt.raw_bind_parameter(at + 5, rev))
                    .and_then(|()| stmt.raw_bind_parameter(at + 6, text.as_str()));
            }
            bound.and_then(|()| stmt.raw_execute()).map(|_| ())
        } else {
            waiting.iter().enumerate().try_for_each(|(i, (key, text))| {
                tried = &waiting[i..=i];
                one.execute(params![
                    key.group(),
                    key.kind(),
                    key.namespace(),
                    key.name(),
                    rev,
                    text
                ])
                .map(|_| ())
            })
        };
        if let Err(e) = inserted {
            if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) {
                // Created by someone else since the caller looked: that key's conflict.
                for (key, _) in tried {
                    Precondition::Absent.check_version(key, read_rev(tx, key, "commit")?)?;
                }
            }
            return Err(backend("commit")(e));
        }
        // The buffer kept for the next ones.
        self.waiting = waiting;
        self.waiting.clear();
        Ok(())
    }
}

/// Bodies of this many bytes or more are bound in place ([`insert_in_place`]); smaller ones go
/// through rusqlite's cached statement, which copies them.
const BIND_IN_PLACE: usize = 256 * 1024;

/// Runs `sql` (an insert of `(grp, kind, ns, name, rev, body)`, `?1`..`?6`) with every text
/// bound in place (`SQLITE_STATIC`) rather than copied: rusqlite binds text as
/// `SQLITE_TRANSIENT`, a copy SQLite makes of the value, and an app's inventory record is tens
/// of megabytes at 100,000 objects (the copy was 32 MB of the peak). The statement is prepared
/// on the transaction's connection and finalized before this returns, so nothing outlives the
/// borrowed texts (<https://sqlite.org/c3ref/bind_blob.html>: a `SQLITE_STATIC` value must stay
/// unchanged until the statement is finalized or bound again).
///
/// # Errors
///
/// The SQLite error of the prepare, a bind or the step (a key already there is a
/// `ConstraintViolation`, as through rusqlite).
fn insert_in_place(
    tx: &rusqlite::Transaction<'_>,
    sql: &str,
    key: &ObjectKey,
    revision: i64,
    body: &str,
) -> rusqlite::Result<usize> {
    use rusqlite::ffi;
    use std::os::raw::{c_char, c_int};
    let failure = |db: *mut ffi::sqlite3, rc: c_int| {
        // SAFETY: `db` is the open connection; `sqlite3_errmsg` gives a NUL-terminated string
        // it owns, copied here before any other call on it.
        let message = unsafe { std::ffi::CStr::from_ptr(ffi::sqlite3_errmsg(db)) }
            .to_string_lossy()
            .into_owned();
        rusqlite::Error::SqliteFailure(ffi::Error::new(rc), Some(message))
    };
    // SAFETY: the handle is the transaction's own connection, open for as long as `tx` is
    // borrowed; it is used on this thread only, as rusqlite uses it.
    let db = unsafe { tx.handle() };
    let mut stmt: *mut ffi::sqlite3_stmt = std::ptr::null_mut();
    // SAFETY: `sql` is valid for its length (no NUL needed with an explicit length); `stmt`
    // receives the statement or stays null on error.
    let rc = unsafe {
        ffi::sqlite3_prepare_v2(
            db,
            sql.as_ptr().cast::<c_char>(),
            sql.len() as c_int,
            &mut stmt,
            std::ptr::null_mut(),
        )
    };
    if rc != ffi::SQLITE_OK {
        return Err(failure(db, rc));
    }
    let bind_text = |index: c_int, text: &str| {
        // SAFETY: `stmt` is prepared; the text is borrowed for this whole call, so it outlives
        // the statement (finalized below), and is UTF-8.
        unsafe {
            ffi::sqlite3_bind_text64(
                stmt,
                index,
                text.as_ptr().cast::<c_char>(),
                text.len() as ffi::sqlite3_uint64,
                ffi::SQLITE_STATIC(),
                ffi::SQLITE_UTF8 as u8,
            )
        }
    };
    let step = || {
        let texts = [key.group(), key.kind(), key.namespace(), key.name()];
        for (i, text) in texts.into_iter().enumerate() {
            let rc = bind_text(i as c_int + 1, text);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        // SAFETY: as above.
        let rc = unsafe { ffi::sqlite3_bind_int64(stmt, 5, revision) };
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let rc = bind_text(6, body);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        // SAFETY: a prepared statement with every parameter bound.
        unsafe { ffi::sqlite3_step(stmt) }
    };
    let rc = step();
    let result = if rc == ffi::SQLITE_DONE {
        // SAFETY: the open connection.
        Ok(unsafe { ffi::sqlite3_changes(db) } as usize)
    } else {
        Err(failure(db, rc))
    };
    // SAFETY: `stmt` was prepared above and is finalized once; the error, if any, was read.
    unsafe { ffi::sqlite3_finalize(stmt) };
    result
}

/// The end of a commit: the new revision recorded (none when nothing took effect), the
/// change log compacted every `retain` revisions, the transaction committed.
fn finish_commit(
    tx: rusqlite::Transaction<'_>,
    revision: u64,
    stored: Vec<Stored>,
    seq: i64,
    retain: u64,
) -> Result<Committed> {
    if seq == 0 {
        // Nothing took effect (only deletes of absent objects): no new revision.
        return Ok(Committed::default());
    }
    tx.execute(
        "INSERT OR REPLACE INTO meta (k, v) VALUES ('revision', ?1)",
        [revision as i64],
    )
    .map_err(backend("commit"))?;
    if revision.is_multiple_of(retain.clamp(1, 64)) && revision > retain {
        let floor = revision - retain;
        let log = if log_by_row(&tx).map_err(backend("compact"))? {
            "DELETE FROM changes WHERE rev <= ?1"
        } else {
            "DELETE FROM change_sets WHERE rev <= ?1"
        };
        tx.execute(log, [floor as i64])
            .map_err(backend("compact"))?;
        tx.execute(
            "INSERT OR REPLACE INTO meta (k, v) VALUES ('compacted', ?1)",
            [floor as i64],
        )
        .map_err(backend("compact"))?;
    }
    tx.commit().map_err(backend("commit"))?;
    Ok(Committed { revision, stored })
}

/// The insert of a create: refused (a constraint violation) when the key is there.
const CREATE_SQL: &str =
    "INSERT INTO objects (grp, kind, ns, name, rev, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
/// The insert of any other put: the row under the key replaced.
const REPLACE_SQL: &str = "INSERT OR REPLACE INTO objects (grp, kind, ns, name, rev, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
/// A change log entry, in a store whose log is still kept a row per change ([`log_by_row`]).
const CHANGE_SQL: &str = "INSERT INTO changes (rev, seq, grp, kind, ns, name, deleted) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// The change log of one transaction, written as the store keeps it: one set of every key the
/// transaction changed, in order (`change_sets`, [`SCHEMA`]), or a row per change in a store
/// still in an earlier version's layout (decided under the transaction's write lock, so a
/// store moved meanwhile by another process is written as it is now).
enum ChangeLog<'c> {
    /// The set's JSON array so far: `[` and the entries, or empty while there is none.
    Set(Vec<u8>),
    /// [`CHANGE_SQL`], prepared.
    ByRow(rusqlite::CachedStatement<'c>),
}

impl<'c> ChangeLog<'c> {
    fn new(tx: &'c rusqlite::Transaction<'_>) -> Result<Self> {
        Ok(if log_by_row(tx).map_err(backend("commit"))? {
            ChangeLog::ByRow(tx.prepare_cached(CHANGE_SQL).map_err(backend("commit"))?)
        } else {
            ChangeLog::Set(Vec::new())
        })
    }

    /// Records a change of `key` at (`revision`, `seq`): `seq` is its place in the set.
    fn record(&mut self, revision: u64, seq: i64, key: &ObjectKey, deleted: bool) -> Result<()> {
        let text = match self {
            ChangeLog::ByRow(stmt) => return record_change(stmt, revision, seq, key, deleted),
            ChangeLog::Set(text) => text,
        };
        text.push(if text.is_empty() { b'[' } else { b',' });
        text.push(b'[');
        for part in [key.group(), key.kind(), key.namespace(), key.name()] {
            serde_json::to_writer(&mut *text, part).map_err(|e| Error::Backend {
                op: "commit",
                source: Box::new(e),
            })?;
            text.push(b',');
        }
        text.push(if deleted { b'1' } else { b'0' });
        text.push(b']');
        Ok(())
    }

    /// Writes the set at `revision` (nothing when the transaction changed nothing).
    fn finish(self, tx: &rusqlite::Transaction<'_>, revision: u64) -> Result<()> {
        let ChangeLog::Set(mut text) = self else {
            return Ok(());
        };
        if text.is_empty() {
            return Ok(());
        }
        text.push(b']');
        // JSON of `String`s: UTF-8.
        let text = String::from_utf8(text).map_err(|e| Error::Backend {
            op: "commit",
            source: Box::new(e),
        })?;
        tx.prepare_cached("INSERT INTO change_sets (rev, keys) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(params![revision as i64, text]))
            .map_err(backend("commit"))?;
        Ok(())
    }
}

/// Records a change of `key` at (`revision`, `seq`) in a change log kept a row per change,
/// through [`CHANGE_SQL`] prepared.
fn record_change(
    stmt: &mut rusqlite::CachedStatement<'_>,
    revision: u64,
    seq: i64,
    key: &ObjectKey,
    deleted: bool,
) -> Result<()> {
    stmt.execute(params![
        revision as i64,
        seq,
        key.group(),
        key.kind(),
        key.namespace(),
        key.name(),
        deleted as i64
    ])
    .map_err(backend("commit"))?;
    Ok(())
}

/// One look at the change log after `cursor`: the items to send and the new cursor.
fn poll_changes(conn: &Connection, cursor: u64) -> Result<(Vec<WatchItem>, u64)> {
    let tx = conn.unchecked_transaction().map_err(backend("watch"))?;
    let compacted = meta(&tx, "compacted").map_err(backend("watch"))?;
    let current = meta(&tx, "revision").map_err(backend("watch"))?;
    let mut items = Vec::new();
    let mut cursor = cursor;
    if cursor < compacted {
        items.push(WatchItem::Relist { revision: current });
        return Ok((items, current));
    }
    if log_by_row(&tx).map_err(backend("watch"))? {
        read_rows(&tx, cursor, current, &mut items)?;
    } else {
        read_sets(&tx, cursor, current, &mut items)?;
    }
    if current > cursor {
        items.push(WatchItem::Bookmark { revision: current });
    }
    cursor = cursor.max(current);
    Ok((items, cursor))
}

/// The changes of the revisions after `cursor` up to `current` from a change log kept a set
/// per revision ([`ChangeLog`]), in order.
///
/// # Errors
///
/// The backend's error; [`Error::Corrupt`] (naming the set's revision as a key of the reserved
/// group's kind `ChangeSet`) when a set is not the JSON array the commit writes.
fn read_sets(
    tx: &rusqlite::Transaction<'_>,
    cursor: u64,
    current: u64,
    items: &mut Vec<WatchItem>,
) -> Result<()> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT rev, keys FROM change_sets WHERE rev > ?1 AND rev <= ?2 ORDER BY rev",
        )
        .map_err(backend("watch"))?;
    let mut rows = stmt
        .query(params![cursor as i64, current as i64])
        .map_err(backend("watch"))?;
    while let Some(row) = rows.next().map_err(backend("watch"))? {
        let revision = row.get::<_, i64>(0).map_err(backend("watch"))? as u64;
        let keys = row.get_ref(1).map_err(backend("watch"))?;
        type Boxed = Box<dyn std::error::Error + Send + Sync>;
        let set = keys
            .as_str()
            .map_err(Boxed::from)
            .and_then(|t| {
                serde_json::from_str::<Vec<(String, String, String, String, u8)>>(t)
                    .map_err(Boxed::from)
            })
            .map_err(|source| Error::Corrupt {
                key: ObjectKey::new(
                    crate::object::RESERVED_GROUP,
                    "ChangeSet",
                    "",
                    revision.to_string(),
                ),
                source,
            })?;
        items.extend(
            set.into_iter()
                .map(|(group, kind, namespace, name, deleted)| {
                    WatchItem::Event(Event {
                        revision,
                        key: ObjectKey::new(group, kind, namespace, name),
                        deleted: deleted != 0,
                    })
                }),
        );
    }
    Ok(())
}

/// [`read_sets`] from a change log kept a row per change (an earlier version's layout).
fn read_rows(
    tx: &rusqlite::Transaction<'_>,
    cursor: u64,
    current: u64,
    items: &mut Vec<WatchItem>,
) -> Result<()> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT rev, grp, kind, ns, name, deleted FROM changes WHERE rev > ?1 AND rev <= ?2 ORDER BY rev, seq",
        )
        .map_err(backend("watch"))?;
    let rows = stmt
        .query_map(params![cursor as i64, current as i64], |r| {
            Ok(Event {
                revision: r.get::<_, i64>(0)? as u64,
                key: ObjectKey::new(
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                ),
                deleted: r.get::<_, i64>(5)? != 0,
            })
        })
        .map_err(backend("watch"))?;
    for row in rows {
        items.push(WatchItem::Event(row.map_err(backend("watch"))?));
    }
    Ok(())
}

/// Wakes a watch when a file in the store's folder is written: an inotify descriptor (Linux)
/// watching the folder for writes, creations and renames. `None` where it cannot be set up:
/// the watch then polls.
struct Wake(Option<std::os::fd::OwnedFd>);

/// The longest a woken watch waits without an event before it looks anyway.
const WOKEN_LOOK: Duration = Duration::from_millis(100);

/// How long a watch woken by a write that did not show yet looks every millisecond.
const SETTLE: Duration = Duration::from_millis(20);

impl Wake {
    #[cfg(target_os = "linux")]
    fn new(dir: &Path) -> Self {
        use std::os::fd::FromRawFd as _;
        use std::os::unix::ffi::OsStrExt as _;
        let Ok(dir) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
            return Wake(None);
        };
        // SAFETY: plain system calls; the descriptor is owned from here on.
        unsafe {
            let fd = libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK);
            if fd < 0 {
                return Wake(None);
            }
            let fd = std::os::fd::OwnedFd::from_raw_fd(fd);
            let mask = libc::IN_MODIFY | libc::IN_CLOSE_WRITE | libc::IN_CREATE | libc::IN_MOVED_TO;
            if libc::inotify_add_watch(std::os::fd::AsRawFd::as_raw_fd(&fd), dir.as_ptr(), mask) < 0
            {
                return Wake(None);
            }
            Wake(Some(fd))
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn new(_dir: &Path) -> Self {
        Wake(None)
    }

    /// Waits until something in the folder is written (at most [`WOKEN_LOOK`], or 1 ms when
    /// `soon`), or `poll` without a descriptor. Events already queued return at once; they
    /// are all read. True when an event woke it.
    fn wait(&self, poll: Duration, soon: bool) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(fd) = &self.0 {
            use std::os::fd::AsRawFd as _;
            let mut pfd = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let mut buf = [0u8; 4096];
            let timeout = if soon {
                1
            } else {
                WOKEN_LOOK.as_millis() as i32
            };
            // SAFETY: one pollfd, a buffer of its stated length.
            unsafe {
                if libc::poll(&mut pfd, 1, timeout) > 0 {
                    while libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) > 0 {}
                    return true;
                }
            }
            return false;
        }
        std::thread::sleep(poll);
        false
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn get(&self, key: &ObjectKey) -> Result<Option<Object>> {
        let key = key.clone();
        self.with_conn("get", move |c| read_one(c, &key)).await
    }

    async fn get_json(&self, key: &ObjectKey) -> Result<Option<(String, u64)>> {
        let key = key.clone();
        self.with_conn("get", move |c| {
            c.prepare_cached(
                "SELECT body, rev FROM objects WHERE grp = ?1 AND kind = ?2 AND ns = ?3 AND name = ?4",
            )
            .and_then(|mut s| {
                s.query_row(params![key.group(), key.kind(), key.namespace(), key.name()], |r| {
                    let rev = r.get::<_, i64>(1)? as u64;
                    Ok(body_text(&key, r.get_ref(0)?).map(|body| (body, rev)))
                })
                .optional()
            })
            .map_err(backend("get"))?
            .transpose()
        })
        .await
    }

    async fn version_of(&self, key: &ObjectKey) -> Result<Option<u64>> {
        let key = key.clone();
        self.with_conn("version_of", move |c| read_rev(c, &key, "version_of"))
            .await
    }

    async fn versions(&self, keys: &[&ObjectKey]) -> Result<Vec<super::Version>> {
        // By (group, kind, namespace): one range scan of the key index's prefix for a large
        // group, one lookup per key for a small one; no bodies read (the rows' other pages
        // than the body's first); one read transaction, so one revision.
        let mut groups: HashMap<(&str, &str, &str), Vec<usize>> = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            groups
                .entry((k.group(), k.kind(), k.namespace()))
                .or_default()
                .push(i);
        }
        let asks: Vec<(String, String, String, Option<Vec<String>>)> = groups
            .iter()
            .map(|((g, k, n), idx)| {
                let names = (idx.len() < 32)
                    .then(|| idx.iter().map(|i| keys[*i].name().to_string()).collect());
                (g.to_string(), k.to_string(), n.to_string(), names)
            })
            .collect();
        let answers: Vec<HashMap<String, u64>> = self
            .with_conn("versions", move |c| {
                let tx = c.transaction().map_err(backend("versions"))?;
                let mut out = Vec::new();
                for (grp, kind, ns, names) in asks {
                    let mut found = HashMap::new();
                    match names {
                        Some(names) => {
                            for name in names {
                                let key = ObjectKey::new(&grp, &kind, &ns, &name);
                                if let Some(rv) = read_rev(&tx, &key, "versions")? {
                                    found.insert(name, rv);
                                }
                            }
                        }
                        None => {
                            let mut stmt = tx
                                .prepare_cached(
                                    "SELECT name, rev FROM objects \
                                     WHERE grp = ?1 AND kind = ?2 AND ns = ?3",
                                )
                                .map_err(backend("versions"))?;
                            let rows = stmt
                                .query_map(params![grp, kind, ns], |r| {
                                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
                                })
                                .map_err(backend("versions"))?;
                            for row in rows {
                                let (name, rv) = row.map_err(backend("versions"))?;
                                found.insert(name, rv);
                            }
                        }
                    }
                    out.push(found);
                }
                Ok(out)
            })
            .await?;
        let mut out = vec![super::Version::Absent; keys.len()];
        for (idx, found) in groups.values().zip(&answers) {
            for i in idx {
                out[*i] = super::Version::from_lookup(found.get(keys[*i].name()).copied());
            }
        }
        Ok(out)
    }

    async fn get_many(&self, keys: &[ObjectKey]) -> Result<Listing> {
        let keys = keys.to_vec();
        self.with_conn("get_many", move |c| {
            let tx = c.transaction().map_err(backend("get_many"))?;
            let revision = meta(&tx, "revision").map_err(backend("get_many"))?;
            // The bodies first, in one read transaction: by (group, kind, namespace), one
            // range scan of the key index for a large group, one lookup per key for a small
            // one. Then decoded on all cores.
            // Keys of one (group, kind, namespace) one after another (a sync asks in key order,
            // so each group is one run; asked in another order, a group may come as several
            // runs, each read alone): no hash of each key to group them.
            let mut runs: Vec<&[ObjectKey]> = Vec::new();
            let mut start = 0;
            for i in 1..=keys.len() {
                let ends = i == keys.len() || {
                    let (a, b) = (&keys[i - 1], &keys[i]);
                    (a.group(), a.kind(), a.namespace()) != (b.group(), b.kind(), b.namespace())
                };
                if ends {
                    runs.push(&keys[start..i]);
                    start = i;
                }
            }
            let mut bodies: Vec<(&ObjectKey, String)> = Vec::with_capacity(keys.len());
            for members in runs {
                if members.len() < 32 {
                    for key in members {
                        if let Some(body) = read_body(&tx, key)? {
                            bodies.push((key, body));
                        }
                    }
                    continue;
                }
                let first = &members[0];
                // By name, made once a row comes (none in a store without the group).
                let mut wanted: Option<Vec<(&str, &ObjectKey)>> = None;
                let mut stmt = tx
                    .prepare_cached(
                        "SELECT name, body FROM objects WHERE grp = ?1 AND kind = ?2 AND ns = ?3",
                    )
                    .map_err(backend("get_many"))?;
                let mut rows = stmt
                    .query(params![first.group(), first.kind(), first.namespace()])
                    .map_err(backend("get_many"))?;
                while let Some(row) = rows.next().map_err(backend("get_many"))? {
                    let name = row.get_ref(0).map_err(backend("get_many"))?;
                    let name = name.as_str().map_err(|e| backend("get_many")(e.into()))?;
                    let wanted = wanted.get_or_insert_with(|| {
                        let mut w: Vec<(&str, &ObjectKey)> =
                            members.iter().map(|k| (k.name(), k)).collect();
                        // Sorted already when asked in key order (then one pass).
                        w.sort_by(|a, b| a.0.cmp(b.0));
                        w
                    });
                    if let Ok(at) = wanted.binary_search_by(|(n, _)| (*n).cmp(name)) {
                        let key = wanted[at].1;
                        let body = row.get_ref(1).map_err(backend("get_many"))?;
                        bodies.push((key, body_text(key, body)?));
                    }
                }
            }
            let decoded = crate::par::map("decode", &bodies, 256, |(k, b)| decode(k, b));
            let mut objects = std::collections::BTreeMap::new();
            for ((key, _), o) in bodies.iter().zip(decoded) {
                objects.insert((*key).clone(), o?);
            }
            Ok(Listing {
                revision,
                objects,
                unreadable: Default::default(),
            })
        })
        .await
    }

    async fn list(&self, selector: &Selector) -> Result<Listing> {
        let selector = selector.clone();
        self.with_conn("list", move |c| {
            let tx = c.transaction().map_err(backend("list"))?;
            let revision = meta(&tx, "revision").map_err(backend("list"))?;
            let mut stmt = tx
                .prepare_cached(
                    "SELECT grp, kind, ns, name, body FROM objects
                     WHERE (?1 IS NULL OR grp = ?1) AND (?2 IS NULL OR kind = ?2) AND (?3 IS NULL OR ns = ?3)
                     ORDER BY grp, kind, ns, name",
                )
                .map_err(backend("list"))?;
            let rows = stmt
                .query_map(
                    params![selector.group, selector.kind, selector.namespace],
                    |r| {
                        Ok((
                            ObjectKey::new(
                                r.get::<_, String>(0)?,
                                r.get::<_, String>(1)?,
                                r.get::<_, String>(2)?,
                                r.get::<_, String>(3)?,
                            ),
                            r.get::<_, rusqlite::types::Value>(4)?,
                        ))
                    },
                )
                .map_err(backend("list"))?;
            let mut objects = std::collections::BTreeMap::new();
            let mut unreadable = std::collections::BTreeMap::new();
            for row in rows {
                let (key, body) = row.map_err(backend("list"))?;
                if selector.matches(&key) {
                    let body = body_text(&key, (&body).into());
                    match body.and_then(|body| decode(&key, &body)) {
                        Ok(o) => {
                            objects.insert(key, o);
                        }
                        Err(e) => {
                            unreadable.insert(key, super::error_chain(&e));
                        }
                    }
                }
            }
            Ok(Listing {
                revision,
                objects,
                unreadable,
            })
        })
        .await
    }

    async fn commit(&self, writes: Vec<Write>) -> Result<Committed> {
        if writes.is_empty() {
            return Ok(Committed::default());
        }
        let retain = self.opts.retain_revisions;
        let heads = self.heads.clone();
        self.with_conn("commit", move |c| {
            let mut heads = heads.lock().unwrap_or_else(|e| e.into_inner());
            commit_blocking(c, writes, retain, &mut heads)
        })
        .await
    }

    async fn revision(&self) -> Result<u64> {
        self.with_conn("revision", |c| {
            meta(c, "revision").map_err(backend("revision"))
        })
        .await
    }

    async fn watch(&self, from_revision: u64) -> Result<Watch> {
        let conn = open_and_prepare(&self.path, &self.opts).map_err(backend("watch"))?;
        let (tx, rx) = mpsc::channel(1024);
        let poll = self.opts.poll_interval;
        let dir = self.path.parent().filter(|d| !d.as_os_str().is_empty());
        let wake = Wake::new(dir.unwrap_or(Path::new(".")));
        let span =
            tracing::info_span!("store_watch", backend = "sqlite", path = %self.path.display());
        std::thread::Builder::new()
            .name("sqlite-watch".into())
            .spawn(move || {
                let _entered = span.enter();
                let mut cursor = from_revision;
                let mut seen_version: Option<i64> = None;
                // A write wakes the watch before the commit shows (its last step updates the
                // shared memory index, which no file event reports): after a wake that found
                // nothing, look every millisecond for a while.
                let mut settling: Option<std::time::Instant> = None;
                let mut woken = false;
                while !tx.is_closed() {
                    let version = conn.query_row("PRAGMA data_version", [], |r| r.get::<_, i64>(0));
                    let version = match version {
                        Ok(v) => v,
                        Err(e) => {
                            let _ = tx.blocking_send(Err(backend("watch")(e)));
                            return;
                        }
                    };
                    if woken && seen_version == Some(version) && settling.is_none() {
                        settling = Some(std::time::Instant::now() + SETTLE);
                    }
                    if seen_version != Some(version) {
                        settling = None;
                        seen_version = Some(version);
                        match poll_changes(&conn, cursor) {
                            Ok((items, next)) => {
                                cursor = next;
                                for item in items {
                                    if tx.blocking_send(Ok(item)).is_err() {
                                        return;
                                    }
                                }
                            }
                            Err(e) => {
                                let _ = tx.blocking_send(Err(e));
                                return;
                            }
                        }
                    }
                    if settling.is_some_and(|until| std::time::Instant::now() >= until) {
                        settling = None;
                    }
                    woken = wake.wait(poll, settling.is_some());
                }
            })
            .map_err(|e| Error::Backend {
                op: "watch",
                source: Box::new(e),
            })?;
        Ok(rx)
    }

    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn settle(&self, timeout: Duration) -> bool {
        let checkpoints = self.checkpoints.clone();
        tokio::task::spawn_blocking(move || checkpoints.settle(timeout))
            .await
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config_map(i: usize, bytes: usize) -> Write {
        Write::Put {
            object: Object::from_value(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": format!("c{i:05}"), "namespace": "default"},
                "data": {"v": "x".repeat(bytes)},
            }))
            .unwrap(),
            precondition: Precondition::Absent,
            json: None,
        }
    }

    /// Creates go into the table many to a statement: across its boundaries (64), with a
    /// write of another kind between them, every write is stored and logged in the order
    /// given; a key already there, in the first or a later full statement or among the last
    /// few, fails the commit naming that key, and nothing of it is stored.
    #[tokio::test]
    async fn creates_inserted_many_to_a_statement_keep_order_and_name_a_conflict() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("s.db"), Options::default()).unwrap();
        store.commit(vec![config_map(100, 1)]).await.unwrap();
        let mut writes: Vec<Write> = (0..200)
            .filter(|i| *i != 100)
            .map(|i| config_map(i, 3))
            .collect();
        // Between the creates: a replace of the object there.
        let Write::Put { object, .. } = config_map(100, 5) else {
            unreachable!()
        };
        writes.insert(
            130,
            Write::Put {
                object,
                precondition: Precondition::Any,
                json: None,
            },
        );
        let order: Vec<ObjectKey> = writes.iter().map(Write::key).collect();
        let committed = store.commit(writes).await.unwrap();
        let stored: Vec<ObjectKey> = committed.stored.iter().map(Stored::key).collect();
        assert_eq!(stored, order);
        let logged: Vec<String> = changes_after(&store, committed.revision - 1)
            .await
            .into_iter()
            .map(|(_, name, _)| name)
            .collect();
        let names: Vec<String> = order.iter().map(|k| k.name().to_string()).collect();
        assert_eq!(logged, names, "logged in the order written");
        for key in &order {
            let o = store.get(key).await.unwrap().unwrap();
            let size = if key.name() == "c00100" { 5 } else { 3 };
            assert_eq!(
                o.get("data"),
                Some(&json!({"v": "x".repeat(size)})),
                "{key}"
            );
        }

        for there in [10, 70, 198] {
            let before = store.revision().await.unwrap();
            let mut writes: Vec<Write> = (300..500).map(|i| config_map(i, 3)).collect();
            writes[there] = config_map(there, 3);
            let err = store.commit(writes).await.unwrap_err();
            assert!(
                matches!(&err, Error::Conflict { key, .. } if key.name() == format!("c{there:05}")),
                "{there}: {err}"
            );
            assert_eq!(store.revision().await.unwrap(), before);
            for i in [300, 499] {
                let key = config_map(i, 0).key();
                assert!(store.get(&key).await.unwrap().is_none(), "{there}: {key}");
            }
        }
    }

    /// (frames in the log, frames copied back), asked of a connection of its own.
    fn log_of(path: &Path) -> (i64, i64) {
        let raw = Connection::open(path).unwrap();
        raw.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get(1)?, r.get(2)?))
        })
        .unwrap()
    }

    /// A commit that leaves the log past SQLite's threshold does not copy it back itself: the
    /// store's thread does, and `settle` waits for it. A small commit starts no thread.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_log_is_checkpointed_by_the_stores_thread_not_in_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = SqliteStore::open(&path, Options::default()).unwrap();
        store.commit(vec![config_map(0, 100)]).await.unwrap();
        assert!(store.settle(Duration::from_secs(1)).await);
        assert_eq!(store.checkpoints.runs(), 0, "a small commit asks for none");

        // About 6 MB: well past 1,000 pages of 4 KiB.
        let writes = (1..3000).map(|i| config_map(i, 2000)).collect();
        store.commit(writes).await.unwrap();
        assert!(store.settle(Duration::from_secs(60)).await);
        assert!(
            store.checkpoints.runs() >= 1,
            "the store's thread checkpointed"
        );
        let copied_back = std::fs::metadata(&path).unwrap().len();
        assert!(
            copied_back > 5_000_000,
            "the database file holds what was committed: {copied_back} bytes"
        );
        let (log, copied) = log_of(&path);
        assert_eq!(log, copied, "nothing is left to copy back");
        // What was committed reads back whole through another handle.
        let other = SqliteStore::open(&path, Options::default()).unwrap();
        let listed = other
            .list(&Selector {
                kind: Some("ConfigMap".into()),
                ..Selector::default()
            })
            .await
            .unwrap();
        assert_eq!(listed.objects.len(), 3000);
    }

    /// A store file in the earlier layout (`objects` keyed `WITHOUT ROWID`, the change log a
    /// row per change) holding one ConfigMap at revision 7.
    fn old_layout_store(path: &Path) {
        let old = Connection::open(path).unwrap();
        old.execute_batch(
                "PRAGMA journal_mode=WAL;
                 CREATE TABLE objects (grp TEXT NOT NULL, kind TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
                     rev INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (grp, kind, ns, name)) WITHOUT ROWID;
                 CREATE TABLE changes (rev INTEGER NOT NULL, seq INTEGER NOT NULL,
                     grp TEXT NOT NULL, kind TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
                     deleted INTEGER NOT NULL, PRIMARY KEY (rev, seq)) WITHOUT ROWID;
                 CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL) WITHOUT ROWID;
                 INSERT INTO objects VALUES ('', 'ConfigMap', 'default', 'c', 7,
                     '{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\",\"namespace\":\"default\",\"resourceVersion\":\"7\"}}');
                 INSERT INTO changes VALUES (7, 0, '', 'ConfigMap', 'default', 'c', 0);
                 INSERT INTO meta VALUES ('revision', 7);",
            )
            .unwrap();
    }

    /// The next item of a watch, waited for at most 10 s.
    async fn next_item(w: &mut Watch) -> WatchItem {
        tokio::time::timeout(Duration::from_secs(10), w.recv())
            .await
            .expect("an item within 10 s")
            .expect("the watch is open")
            .expect("no error")
    }

    /// The changes a watch from `from` gives up to its first bookmark: (revision, name,
    /// deleted).
    async fn changes_after(store: &SqliteStore, from: u64) -> Vec<(u64, String, bool)> {
        let mut w = store.watch(from).await.unwrap();
        let mut seen = Vec::new();
        loop {
            match next_item(&mut w).await {
                WatchItem::Event(e) => seen.push((e.revision, e.key.name().to_string(), e.deleted)),
                WatchItem::Bookmark { .. } => return seen,
                other => panic!("{other:?}"),
            }
        }
    }

    /// A store an earlier version made is moved into the current layout when opened, rows,
    /// revision and change log kept.
    #[tokio::test]
    async fn an_earlier_versions_store_is_moved_into_the_current_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        old_layout_store(&path);
        // A second change in the same revision: the set keeps their order.
        Connection::open(&path)
            .unwrap()
            .execute_batch(
                "INSERT INTO changes VALUES (7, 1, '', 'ConfigMap', 'default', 'gone', 1);
                 INSERT INTO changes VALUES (6, 0, '', 'ConfigMap', 'default', 'older', 0);",
            )
            .unwrap();
        let store = SqliteStore::open(&path, Options::default()).unwrap();
        let key = ObjectKey::new("", "ConfigMap", "default", "c");
        let found = store.get(&key).await.unwrap().expect("the row was moved");
        assert_eq!(found.resource_version(), Some(7));
        assert_eq!(store.revision().await.unwrap(), 7);
        let raw = Connection::open(&path).unwrap();
        let sql: String = raw
            .query_row(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'objects'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(!sql.contains("WITHOUT ROWID"), "{sql}");
        assert_eq!(layout(&raw).unwrap(), Layout::Current);
        // The change log: one set per revision, the rows in their order, read by the watch.
        let sets: Vec<(i64, String)> = raw
            .prepare("SELECT rev, keys FROM change_sets ORDER BY rev")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            sets,
            [
                (6, r#"[["","ConfigMap","default","older",0]]"#.to_string()),
                (
                    7,
                    r#"[["","ConfigMap","default","c",0],["","ConfigMap","default","gone",1]]"#
                        .to_string()
                )
            ]
        );
        assert_eq!(
            changes_after(&store, 5).await,
            [
                (6, "older".to_string(), false),
                (7, "c".to_string(), false),
                (7, "gone".to_string(), true)
            ]
        );
        // The key stays unique: a create of an existing key is refused as before.
        let again = store.commit(vec![config_map_named("c")]).await;
        assert!(matches!(again, Err(Error::Conflict { .. })), "{again:?}");
        // And opening it again changes nothing.
        drop(store);
        let reopened = SqliteStore::open(&path, Options::default()).unwrap();
        assert!(reopened.get(&key).await.unwrap().is_some());
    }

    /// While another process holds the write lock, an earlier version's store opens at once
    /// and reads as it is (no wait for the lock, no failure); the next open moves it.
    #[tokio::test]
    async fn an_earlier_layout_is_read_as_it_is_while_another_process_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        old_layout_store(&path);
        let mut holder = Connection::open(&path).unwrap();
        let lock = holder
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        let started = std::time::Instant::now();
        let store = SqliteStore::open(&path, Options::default()).unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "waited {:?} for the lock",
            started.elapsed()
        );
        let key = ObjectKey::new("", "ConfigMap", "default", "c");
        let found = store.get(&key).await.unwrap().expect("read as it is");
        assert_eq!(found.resource_version(), Some(7));
        assert!(without_rowid(&Connection::open(&path).unwrap()).unwrap());
        lock.rollback().unwrap();
        // Written as it is kept: its change log a row per change, which its watch reads.
        let committed = store.commit(vec![config_map_named("d")]).await.unwrap();
        assert_eq!(committed.revision, 8);
        assert!(log_by_row(&Connection::open(&path).unwrap()).unwrap());
        assert_eq!(
            changes_after(&store, 6).await,
            [(7, "c".to_string(), false), (8, "d".to_string(), false)]
        );
        drop(store);
        let store = SqliteStore::open(&path, Options::default()).unwrap();
        assert!(!without_rowid(&Connection::open(&path).unwrap()).unwrap());
        assert!(!log_by_row(&Connection::open(&path).unwrap()).unwrap());
        assert!(store.get(&key).await.unwrap().is_some());
        assert_eq!(
            changes_after(&store, 6).await,
            [(7, "c".to_string(), false), (8, "d".to_string(), false)]
        );
    }

    /// The change log is one row per transaction, and `changes` a view of it with the columns
    /// an earlier version's table had: that version's watch query reads every change in order,
    /// and its write of a change row fails loudly instead of going where no watch looks.
    #[tokio::test]
    async fn an_earlier_versions_watch_reads_the_log_and_its_writes_fail_loudly() {
        let (_dir, path, store) = fresh();
        store
            .commit(vec![config_map_named("a"), config_map_named("b")])
            .await
            .unwrap();
        store
            .commit(vec![Write::Delete {
                key: ObjectKey::new("", "ConfigMap", "default", "a"),
                precondition: Precondition::Any,
            }])
            .await
            .unwrap();
        let raw = Connection::open(&path).unwrap();
        let sets: i64 = raw
            .query_row("SELECT count(*) FROM change_sets", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sets, 2);
        // The earlier version's watch query, as it was.
        let rows: Vec<(i64, String, i64)> = raw
            .prepare(
                "SELECT rev, grp, kind, ns, name, deleted FROM changes WHERE rev > ?1 AND rev <= ?2 ORDER BY rev, seq",
            )
            .unwrap()
            .query_map([0, 2], |r| Ok((r.get(0)?, r.get(4)?, r.get(5)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            rows,
            [
                (1, "a".to_string(), 0),
                (1, "b".to_string(), 0),
                (2, "a".to_string(), 1)
            ]
        );
        // Its writes and its compaction are refused.
        for old in [
            "INSERT INTO changes (rev, seq, grp, kind, ns, name, deleted) VALUES (3, 0, '', 'ConfigMap', 'default', 'c', 0)",
            "DELETE FROM changes WHERE rev <= 1",
        ] {
            let e = raw.execute(old, []).unwrap_err().to_string();
            assert!(e.contains("view"), "{e}");
        }
        // Its start-up (the tables made if missing) leaves the layout as it is.
        raw.execute_batch(
            "CREATE TABLE IF NOT EXISTS changes (rev INTEGER NOT NULL, seq INTEGER NOT NULL,
                 grp TEXT NOT NULL, kind TEXT NOT NULL, ns TEXT NOT NULL, name TEXT NOT NULL,
                 deleted INTEGER NOT NULL, PRIMARY KEY (rev, seq)) WITHOUT ROWID;",
        )
        .unwrap();
        assert_eq!(layout(&raw).unwrap(), Layout::Current);
    }

    /// A change set that is not the JSON array a commit writes stops the watch with an error
    /// naming its revision, rather than skipping what it held.
    #[tokio::test]
    async fn a_damaged_change_set_is_an_error_naming_its_revision() {
        let (_dir, path, store) = fresh();
        store.commit(vec![config_map_named("a")]).await.unwrap();
        Connection::open(&path)
            .unwrap()
            .execute(
                "UPDATE change_sets SET keys = '[[\"\", 1]]' WHERE rev = 1",
                [],
            )
            .unwrap();
        let mut w = store.watch(0).await.unwrap();
        let e = tokio::time::timeout(Duration::from_secs(10), w.recv())
            .await
            .unwrap()
            .unwrap()
            .unwrap_err();
        match e {
            Error::Corrupt { key, .. } => {
                assert_eq!((key.kind(), key.name()), ("ChangeSet", "1"));
            }
            other => panic!("{other:?}"),
        }
    }

    fn config_map_named(name: &str) -> Write {
        Write::Put {
            object: Object::from_value(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "default"},
            }))
            .unwrap(),
            precondition: Precondition::Absent,
            json: None,
        }
    }

    /// An inventory-like record of `n` entries.
    fn inventory(name: &str, n: usize, precondition: Precondition) -> Write {
        let entries: Vec<serde_json::Value> = (0..n)
            .map(|i| json!({"kind": "ConfigMap", "metadata": {"name": format!("config-{i:06}")}, "data": {"greeting": "hello"}}))
            .collect();
        Write::PutRecord {
            record: crate::store::RecordText::new(
                "Inventory",
                name,
                "spec",
                &json!({"entries": entries}),
            )
            .unwrap(),
            precondition,
        }
    }

    /// A store in a new file of a temporary folder (kept while the folder is).
    fn fresh() -> (tempfile::TempDir, PathBuf, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = SqliteStore::open(&path, Options::default()).unwrap();
        (dir, path, store)
    }

    /// Every record of the reserved group, listed.
    async fn records(store: &SqliteStore) -> Listing {
        store
            .list(&Selector {
                group: Some(crate::object::RESERVED_GROUP.into()),
                ..Selector::default()
            })
            .await
            .unwrap()
    }

    /// How `key`'s body is stored: SQLite's `typeof` and its length in bytes.
    fn stored_as(path: &Path, key: &ObjectKey) -> (String, i64) {
        Connection::open(path)
            .unwrap()
            .query_row(
                "SELECT typeof(body), length(body) FROM objects WHERE grp = ?1 AND kind = ?2 AND name = ?3",
                params![key.group(), key.kind(), key.name()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
    }

    /// A record of `COMPRESS_FROM` bytes or more is kept as its gzip (a BLOB, a small part of
    /// its size), a smaller one and every object as JSON text; each reads back whole through
    /// every read (get, get_json, get_many, list). A rewrite through another handle, which has
    /// not seen the record's head, keeps its creationTimestamp and generation, read from the
    /// gzip.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_records_are_kept_as_their_gzip_and_read_back_whole() {
        let (_dir, path, store) = fresh();
        let large = ObjectKey::new(crate::object::RESERVED_GROUP, "Inventory", "", "large");
        let small = ObjectKey::new(crate::object::RESERVED_GROUP, "Inventory", "", "small");
        store
            .commit(vec![
                inventory("large", 2000, Precondition::Absent),
                inventory("small", 3, Precondition::Absent),
                config_map(0, 40_000),
            ])
            .await
            .unwrap();
        let (kind, bytes) = stored_as(&path, &large);
        assert_eq!(kind, "blob");
        let (json, _) = store.get_json(&large).await.unwrap().unwrap();
        assert!(json.len() >= COMPRESS_FROM, "{} bytes", json.len());
        assert!(bytes * 10 < json.len() as i64, "{bytes} of {}", json.len());
        assert!(json.starts_with("{\"apiVersion\":\"driftless.io/v1\",\"kind\":\"Inventory\""));
        assert_eq!(stored_as(&path, &small).0, "text");
        let cm = ObjectKey::new("", "ConfigMap", "default", "c00000");
        assert_eq!(
            stored_as(&path, &cm).0,
            "text",
            "objects stay text, however large"
        );

        let got = store.get(&large).await.unwrap().unwrap();
        let entries = got.get("spec").unwrap()["entries"].as_array().unwrap();
        assert_eq!(entries.len(), 2000);
        assert_eq!(entries[1999]["metadata"]["name"], "config-001999");
        let many = store
            .get_many(&[large.clone(), small.clone()])
            .await
            .unwrap();
        assert_eq!(many.objects[&large], got);
        let listed = records(&store).await;
        assert!(listed.unreadable.is_empty(), "{:?}", listed.unreadable);
        assert_eq!(listed.objects[&large], got);
        assert_eq!(listed.objects[&small], many.objects[&small]);

        // Another handle rewrites it: the head is read from the gzip.
        let created = got.metadata()["creationTimestamp"].clone();
        let generation = got.metadata()["generation"].clone();
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let other = SqliteStore::open(&path, Options::default()).unwrap();
        let rv = got.resource_version().unwrap();
        other
            .commit(vec![inventory(
                "large",
                2001,
                Precondition::ResourceVersion(rv),
            )])
            .await
            .unwrap();
        let again = store.get(&large).await.unwrap().unwrap();
        assert_ne!(again.resource_version(), Some(rv));
        assert_eq!(again.metadata()["creationTimestamp"], created);
        assert_eq!(again.metadata()["generation"], generation);
        assert_eq!(
            again.get("spec").unwrap()["entries"]
                .as_array()
                .unwrap()
                .len(),
            2001
        );

        // In a commit large enough to make its texts on a second thread, the record's fields
        // are compressed on a third from the start, ahead of its stamped head: the same text
        // reads back.
        let mut writes: Vec<Write> = (1..300).map(|i| config_map(i, 100)).collect();
        let rv = again.resource_version().unwrap();
        writes.push(inventory("large", 2002, Precondition::ResourceVersion(rv)));
        store.commit(writes).await.unwrap();
        assert_eq!(stored_as(&path, &large).0, "blob");
        let (json, _) = store.get_json(&large).await.unwrap().unwrap();
        let last = store.get(&large).await.unwrap().unwrap();
        assert_eq!(last.metadata()["creationTimestamp"], created);
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&json).unwrap()["spec"]["entries"]
                .as_array()
                .unwrap()
                .len(),
            2002
        );
        assert!(json.starts_with("{\"apiVersion\":\"driftless.io/v1\",\"kind\":\"Inventory\""));
    }

    /// A gzip that does not expand (damaged by hand) is an error naming the record from a get,
    /// and an unreadable record, named with why, in a listing: never an empty record.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_damaged_gzip_is_named_not_read_as_empty() {
        let (_dir, path, store) = fresh();
        store
            .commit(vec![inventory("app", 2000, Precondition::Absent)])
            .await
            .unwrap();
        Connection::open(&path)
            .unwrap()
            .execute(
                "UPDATE objects SET body = substr(body, 1, length(body) / 2) WHERE kind = 'Inventory'",
                [],
            )
            .unwrap();
        let key = ObjectKey::new(crate::object::RESERVED_GROUP, "Inventory", "", "app");
        assert_eq!(stored_as(&path, &key).0, "blob");
        let err = store.get(&key).await.unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { key: k, .. } if *k == key),
            "{err:?}"
        );
        assert!(
            crate::store::error_chain(&err).contains("gzip"),
            "{}",
            crate::store::error_chain(&err)
        );
        let listed = records(&store).await;
        assert!(listed.objects.is_empty());
        assert!(
            listed.unreadable[&key].contains("gzip"),
            "{:?}",
            listed.unreadable
        );
    }

    /// The thread ends with the store's last handle.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_checkpoint_thread_ends_with_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = SqliteStore::open(&path, Options::default()).unwrap();
        let writes = (0..3000).map(|i| config_map(i, 2000)).collect();
        store.commit(writes).await.unwrap();
        assert!(store.settle(Duration::from_secs(60)).await);
        let shared = store.checkpoints.liveness();
        drop(store);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while shared.strong_count() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the checkpoint thread still runs"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
