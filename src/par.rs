//! Computation on all cores: [`map`] cuts a slice into pieces that one scoped thread per core
//! takes in turn, giving the results in the slice's order. For pure work over many items
//! (parsing files, planning objects, decoding stored bodies): the threads do no I/O and end
//! before it returns; each runs in a `par` tracing span named by the caller.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Pieces per thread that [`map`] cuts a slice into: a thread that finishes early (its items
/// were lighter, or its core was busy elsewhere) takes more of them instead of waiting for the
/// others, at the cost of one atomic increment per piece.
const PIECES_PER_THREAD: usize = 8;

/// `f` applied to every item, on all cores when there are at least `min` items (fewer: on the
/// caller's thread, where a thread would cost more than it saves). A panic in `f` is resumed
/// on the caller's thread.
pub fn map<T: Sync, R: Send>(
    what: &'static str,
    items: &[T],
    min: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads < 2 || items.len() < min.max(2) {
        return items.iter().map(f).collect();
    }
    let piece = items.len().div_ceil(threads * PIECES_PER_THREAD).max(1);
    let pieces = items.len().div_ceil(piece);
    let next = AtomicUsize::new(0);
    // Pieces taken in turn: (piece number, its results).
    let work = |part: usize| {
        let _span = tracing::debug_span!("par", what, part).entered();
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= pieces {
                return done;
            }
            let start = i * piece;
            let end = (start + piece).min(items.len());
            done.push((i, items[start..end].iter().map(&f).collect::<Vec<_>>()));
        }
    };
    let work = &work;
    let taken: Vec<Vec<(usize, Vec<R>)>> = std::thread::scope(|scope| {
        // The caller's thread only waits: a runtime thread taking part shared glibc's
        // allocator arena with a new thread (M_ARENA_MAX=2, `cli::tune_malloc`), and the health
        // pass of a cold sync of 10,000 objects took 30 to 160 ms instead of 35 to 43.
        let handles: Vec<_> = (0..threads)
            .map(|part| scope.spawn(move || work(part)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut ordered: Vec<Option<Vec<R>>> = (0..pieces).map(|_| None).collect();
    for (i, results) in taken.into_iter().flatten() {
        ordered[i] = Some(results);
    }
    let mut out = Vec::with_capacity(items.len());
    for results in ordered.into_iter().flatten() {
        out.extend(results);
    }
    out
}

/// `f` applied to the items in parts of `part` items, on all cores, a batch of `batch` items
/// at a time, each result handed to `take` in the items' order before the next batch is made:
/// for texts made from many objects (a record, a digest), whose memory beside the result stays
/// one batch's worth.
pub fn map_batched<T: Sync, R: Send>(
    what: &'static str,
    items: &[T],
    batch: usize,
    part: usize,
    f: impl Fn(&[T]) -> R + Sync,
    mut take: impl FnMut(R),
) {
    for batch in items.chunks(batch.max(1)) {
        let parts: Vec<&[T]> = batch.chunks(part.max(1)).collect();
        for r in map(what, &parts, 2, |p| f(p)) {
            take(r);
        }
    }
}

/// Each of `items` written by `write` into `out`, joined by commas (the members of a JSON
/// array), the texts made on all cores in parts of 256 items, 4,096 at a time
/// ([`map_batched`]): for the large records' lists (an inventory's entries, a status's
/// resources). The first error `write` gives is returned; `out` then holds part of the text.
///
/// # Errors
///
/// `write`'s first error.
pub fn write_joined<T: Sync, E: Send>(
    what: &'static str,
    items: &[T],
    out: &mut Vec<u8>,
    write: impl Fn(&T, &mut Vec<u8>) -> Result<(), E> + Sync,
) -> Result<(), E> {
    let mut first = true;
    let mut failed = None;
    map_batched(
        what,
        items,
        4096,
        256,
        |part| {
            let mut text = Vec::new();
            for (i, item) in part.iter().enumerate() {
                if i > 0 {
                    text.push(b',');
                }
                write(item, &mut text)?;
            }
            Ok(text)
        },
        |text| match text {
            Ok(text) if failed.is_none() => {
                if !std::mem::take(&mut first) {
                    out.push(b',');
                }
                out.extend_from_slice(&text);
            }
            Ok(_) => {}
            Err(e) => failed = failed.take().or(Some(e)),
        },
    );
    failed.map_or(Ok(()), Err)
}

/// Lowers the calling thread to the lowest scheduling priority (nice 19), for work that may
/// wait for an idle core. Linux gives each thread its own nice value (`setpriority(2)`, NOTES);
/// elsewhere, and when refused, this does nothing.
pub fn lowest_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: setpriority only changes the scheduling priority of this thread (its id).
        let tid = unsafe { libc::gettid() };
        let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19) };
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_come_in_the_order_of_the_items() {
        let items: Vec<u32> = (0..1000).collect();
        assert_eq!(
            super::map("test", &items, 10, |i| i * 2),
            (0..1000).map(|i| i * 2).collect::<Vec<_>>()
        );
        assert_eq!(
            super::map("test", &items[..3], 10, |i| i + 1),
            vec![1, 2, 3]
        );
        assert!(super::map("test", &items[..0], 0, |i| *i).is_empty());
    }

    #[test]
    fn batched_parts_come_in_the_order_of_the_items() {
        let items: Vec<u32> = (0..1000).collect();
        for (batch, part) in [(64, 7), (1000, 256), (1, 1), (0, 0)] {
            let mut seen = Vec::new();
            let mut parts = 0;
            super::map_batched("test", &items, batch, part, <[u32]>::to_vec, |p| {
                parts += 1;
                seen.extend(p)
            });
            assert_eq!(seen, items, "batch {batch}, part {part}");
            assert!(parts >= items.len().div_ceil(part.max(1)));
        }
    }
}
