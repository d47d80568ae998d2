//! Computation on all cores: [`map`] splits a slice into one chunk per core and maps each on a
//! scoped thread, giving the results in the slice's order. For pure work over many items (parsing
//! files, planning objects, decoding stored bodies): the threads do no I/O and end before it
//! returns; each runs in a `par` tracing span named by the caller.

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
    let chunk = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .enumerate()
            .map(|(i, part)| {
                scope.spawn(move || {
                    let _span = tracing::debug_span!("par", what, part = i).entered();
                    part.iter().map(f).collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
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
