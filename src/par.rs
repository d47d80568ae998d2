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
}
