//! SQLite's checkpoints, off the commit path: copying the write-ahead log back into the database
//! file takes two `fsync`s and every page written since the last one, and SQLite's automatic
//! checkpoint does it inside the commit that crossed its threshold. A cold sync's commit of
//! 10,000 objects (10 MB of log) waited 80 to 145 ms for it, longer than the inserts; an agent's
//! revert of drift that crossed it waited as long. Here the committing connection only says how
//! large the log has grown (SQLite's WAL hook, which replaces the automatic checkpoint), and a
//! thread of the store checkpoints on its own connection: SQLite's "application-initiated
//! checkpoints" (<https://sqlite.org/wal.html#application_initiated_checkpoints>).
//!
//! The checkpoint is `PASSIVE` (<https://sqlite.org/c3ref/wal_checkpoint_v2.html>): it copies
//! what no reader still needs and never waits for, nor blocks, readers and writers. What it has
//! not copied stays in the log, as durable as after any commit, and the next one goes on from
//! there. A process that ends during one loses nothing (a checkpoint is crash-safe); a one-shot
//! command waits for it ([`Checkpointer::settle`]) so that it leaves the log copied back, as the
//! automatic checkpoint did.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rusqlite::Connection;

/// Pages in the log after a commit from which a checkpoint is started: SQLite's default
/// automatic checkpoint threshold (<https://sqlite.org/pragma.html#pragma_wal_autocheckpoint>).
pub(super) const CHECKPOINT_PAGES: i32 = 1000;

/// What the committing connection and the checkpointing thread share.
#[derive(Default)]
struct State {
    /// A commit left the log at or above [`CHECKPOINT_PAGES`] since the last checkpoint began.
    pending: bool,
    /// A checkpoint is being run.
    running: bool,
    /// Every handle of the store is gone: the thread ends.
    stopped: bool,
    /// Checkpoints run, for tests.
    runs: u64,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

/// The checkpointing thread of one SQLite store, started with its first checkpoint; dropping
/// this (with the store's last handle) ends it once any checkpoint in progress ends.
pub(super) struct Checkpointer {
    path: PathBuf,
    shared: Shared,
    started: Mutex<bool>,
}

impl Checkpointer {
    /// A checkpointer of the store file at `path` (its thread not started yet).
    pub(super) fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            shared: Arc::default(),
            started: Mutex::new(false),
        }
    }

    /// Installs the WAL hook on the store's connection: a commit that leaves `pages` pages in
    /// the log, at or above [`CHECKPOINT_PAGES`], asks for a checkpoint. This replaces SQLite's
    /// automatic checkpoint on that connection (the two are the same hook).
    ///
    /// # Errors
    ///
    /// SQLite's, from registering the hook.
    pub(super) fn hook(self: &Arc<Self>, conn: &mut Connection) -> rusqlite::Result<()> {
        let me = Arc::downgrade(self);
        conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages: i32| {
            if pages >= CHECKPOINT_PAGES
                && let Some(me) = me.upgrade()
            {
                me.request();
            }
            Ok(())
        }))
    }

    /// Asks for a checkpoint, starting the thread if it is not running yet. Where no thread
    /// can be started, the checkpoint is left to the next request (the log stays durable).
    fn request(&self) {
        {
            let (lock, wake) = &*self.shared;
            let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
            state.pending = true;
            wake.notify_all();
        }
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        if *started {
            return;
        }
        let shared = self.shared.clone();
        let path = self.path.clone();
        let span = tracing::debug_span!("sqlite_checkpoint", path = %self.path.display());
        let spawned = std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || {
                let _span = span.entered();
                run(&path, &shared);
            });
        match spawned {
            Ok(_) => *started = true,
            Err(e) => {
                tracing::warn!(error = %e, "Cannot start the SQLite checkpoint thread; the write-ahead log grows until it can")
            }
        }
    }

    /// Waits until no checkpoint is asked for or running, at most `timeout`: what a one-shot
    /// command does before it ends. True when none is left.
    pub(super) fn settle(&self, timeout: Duration) -> bool {
        if !*self.started.lock().unwrap_or_else(|e| e.into_inner()) {
            return true;
        }
        let deadline = Instant::now() + timeout;
        let (lock, wake) = &*self.shared;
        let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
        while state.pending || state.running {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = wake
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// A handle that lives as long as the thread (or this) does.
    #[cfg(test)]
    pub(super) fn liveness(&self) -> std::sync::Weak<dyn std::any::Any + Send + Sync> {
        let shared: Arc<dyn std::any::Any + Send + Sync> = self.shared.clone();
        Arc::downgrade(&shared)
    }

    /// Checkpoints run so far.
    #[cfg(test)]
    pub(super) fn runs(&self) -> u64 {
        self.shared.0.lock().unwrap().runs
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let (lock, wake) = &*self.shared;
        lock.lock().unwrap_or_else(|e| e.into_inner()).stopped = true;
        wake.notify_all();
    }
}

/// The thread: one `PASSIVE` checkpoint per request (requests made during one are one more),
/// on a connection of its own opened at the first.
fn run(path: &Path, shared: &Shared) {
    let (lock, wake) = &**shared;
    let mut conn: Option<Connection> = None;
    loop {
        {
            let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
            while !state.pending && !state.stopped {
                state = wake.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            if !state.pending {
                return; // stopped, nothing asked for
            }
            state.pending = false;
            state.running = true;
        }
        let started = Instant::now();
        let outcome = match conn.as_ref() {
            Some(c) => checkpoint(c),
            None => match Connection::open(path) {
                Ok(c) => checkpoint(conn.insert(c)),
                Err(e) => Err(e),
            },
        };
        match outcome {
            Ok((log, copied)) => tracing::debug!(
                log,
                copied,
                ms = started.elapsed().as_millis() as u64,
                "Write-ahead log checkpointed"
            ),
            Err(e) => {
                // The log stays whole and durable: the next request tries again.
                tracing::warn!(error = %e, "SQLite checkpoint failed");
                conn = None;
            }
        }
        let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
        state.running = false;
        state.runs += 1;
        wake.notify_all();
        if state.stopped && !state.pending {
            return;
        }
    }
}

/// One `PASSIVE` checkpoint: (frames in the log, frames copied back), as
/// `PRAGMA wal_checkpoint` gives them (<https://sqlite.org/pragma.html#pragma_wal_checkpoint>).
fn checkpoint(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get(1)?, r.get(2)?))
    })
}
