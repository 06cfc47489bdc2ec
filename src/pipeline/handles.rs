//! Record handles, the Loader's names for records: `chunk id << 32 | row` (row `row` of the
//! chunk the Loader registered as `chunk id`; `jaxrec/_loader/chunks.py`). The planner moves
//! arrays of them around once a group of batches (16k records); these are its steps that
//! touch every handle, which in numpy took several passes and temporaries each.

/// Bits of a handle that hold the row.
pub const ROW_BITS: u32 = 32;

/// The distinct chunk ids `handles` point into, ascending.
///
/// Handles come in runs of one chunk (a piece's records, a block of the interleave), so a run
/// is looked at once.
pub fn chunk_ids(handles: &[u64]) -> Vec<u64> {
    let mut ids = Vec::new();
    let mut last = None;
    for &h in handles {
        let id = h >> ROW_BITS;
        if last != Some(id) {
            ids.push(id);
            last = Some(id);
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Whole rounds of the interleave: round `r` holds block `r` (`k` handles) of each piece in
/// turn, `per[p]` holding piece `p`'s `rounds` blocks one after the other.
///
/// `None` when a piece holds other than `rounds * k` handles.
pub fn round_robin(per: &[&[u64]], rounds: usize, k: usize) -> Option<Vec<u64>> {
    let each = rounds.checked_mul(k)?;
    if per.iter().any(|p| p.len() != each) {
        return None;
    }
    let mut out = Vec::with_capacity(each * per.len()); // the pieces' handles, all in memory
    for r in 0..rounds {
        for p in per {
            out.extend_from_slice(&p[r * k..(r + 1) * k]);
        }
    }
    Some(out)
}

/// The handles of the rows of chunk `id` whose record index (`indices`, one per row) lies in
/// `first..=last` (`last` `None`: no end), in row order.
///
/// A reader's chunk holds its records in file order, so the rows wanted are one range, found
/// by two binary searches (filtering every row cost the planner ~5 us a 2 MiB chunk); indices
/// in any other order are filtered row by row.
pub fn rows_between(id: u64, indices: &[u64], first: u64, last: Option<u64>) -> Vec<u64> {
    let base = id << ROW_BITS;
    let last = last.unwrap_or(u64::MAX);
    if indices.is_sorted() {
        let lo = indices.partition_point(|&i| i < first);
        let hi = indices.partition_point(|&i| i <= last).max(lo);
        return (lo..hi).map(|row| base | row as u64).collect();
    }
    indices
        .iter()
        .enumerate()
        .filter(|&(_, &i)| first <= i && i <= last)
        .map(|(row, _)| base | row as u64)
        .collect()
}

/// A chunk's `indices` (ascending: the file's records it holds) against the `wanted` ones
/// (ascending), as runs in `wanted`'s order: `(true, start, len)`, wanted records held in rows
/// `start..start + len` of the chunk; `(false, 0, len)`, wanted records it does not hold (its
/// reader skipped them as bad). A piece of the Loader's native stream queues a chunk's records
/// this way: a range of the file's records or a subset of them (an elastic resume's), and a
/// hole for each one missing, which keeps the records after it at their counted positions.
pub fn wanted_runs(
    indices: &[u64],
    wanted: impl IntoIterator<Item = u64>,
) -> Vec<(bool, usize, usize)> {
    let mut runs: Vec<(bool, usize, usize)> = Vec::new();
    let mut row = 0;
    for index in wanted {
        while indices.get(row).is_some_and(|&i| i < index) {
            row += 1;
        }
        let held = indices.get(row) == Some(&index);
        match runs.last_mut() {
            Some((true, start, len)) if held && *start + *len == row => *len += 1,
            Some((false, _, len)) if !held => *len += 1,
            _ => runs.push((held, if held { row } else { 0 }, 1)),
        }
        row += usize::from(held);
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded stream of pseudo-random numbers (31 bits each) for the random tests.
    fn lcg(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        }
    }

    #[test]
    fn chunk_ids_are_distinct_and_ascending() {
        let h = |id: u64, row: u64| id << ROW_BITS | row;
        let handles = [
            h(7, 0),
            h(7, 1),
            h(2, 5),
            h(7, 2),
            h(2, 0),
            h(0, 9),
            h(1 << 31, 3),
        ];
        assert_eq!(chunk_ids(&handles), vec![0, 2, 7, 1 << 31]);
        assert!(chunk_ids(&[]).is_empty());
    }

    #[test]
    fn rounds_take_a_block_of_each_piece_in_turn() {
        let a = [1, 2, 3, 4, 5, 6];
        let b = [10, 20, 30, 40, 50, 60];
        assert_eq!(
            round_robin(&[&a, &b], 3, 2),
            Some(vec![1, 2, 10, 20, 3, 4, 30, 40, 5, 6, 50, 60])
        );
        assert_eq!(round_robin(&[&a, &b[..4]], 3, 2), None);
        assert_eq!(round_robin(&[], 3, 2), Some(vec![]));
    }

    #[test]
    fn rows_between_keep_the_indices_in_range() {
        let idx = [3, 4, 7, 8, 9, 12];
        assert_eq!(
            rows_between(1, &[9, 2, 5], 3, Some(9)),
            vec![1 << 32, 1 << 32 | 2]
        );
        let got = |first, last| -> Vec<u64> {
            rows_between(5, &idx, first, last)
                .iter()
                .map(|h| h & 0xFFFF_FFFF)
                .collect()
        };
        assert_eq!(got(0, None), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(got(7, Some(9)), vec![2, 3, 4]);
        assert_eq!(got(5, Some(6)), Vec::<u64>::new());
        assert_eq!(got(13, None), Vec::<u64>::new());
        assert_eq!(got(10, Some(2)), Vec::<u64>::new());
        assert!(rows_between(5, &idx, 0, None)
            .iter()
            .all(|h| h >> ROW_BITS == 5));
    }

    #[test]
    fn rows_between_by_range_agree_with_a_filter() {
        // Sorted indices (a reader's chunk, with gaps where records were skipped, and repeats
        // for robustness) take the binary searches; the same rows as filtering every one.
        let mut next = lcg(7);
        for _ in 0..2000 {
            let n = (next() % 12) as usize;
            let mut idx: Vec<u64> = (0..n).map(|_| next() % 20).collect();
            idx.sort_unstable();
            let first = next() % 24;
            let last = if next().is_multiple_of(4) {
                None
            } else {
                Some(next() % 24)
            };
            let want: Vec<u64> = idx
                .iter()
                .enumerate()
                .filter(|&(_, &i)| first <= i && last.is_none_or(|l| i <= l))
                .map(|(row, _)| 3 << ROW_BITS | row as u64)
                .collect();
            assert_eq!(
                rows_between(3, &idx, first, last),
                want,
                "{idx:?} {first} {last:?}"
            );
        }
    }

    #[test]
    fn wanted_runs_cover_the_wanted_records_in_order() {
        assert_eq!(wanted_runs(&[5, 6, 7], 5..8), vec![(true, 0, 3)]);
        // A range with records skipped: holes between the rows held.
        assert_eq!(
            wanted_runs(&[6, 7, 9], 4..12),
            vec![
                (false, 0, 2),
                (true, 0, 2),
                (false, 0, 1),
                (true, 2, 1),
                (false, 0, 2)
            ]
        );
        assert_eq!(wanted_runs(&[], 3..5), vec![(false, 0, 2)]);
        assert_eq!(wanted_runs(&[], 3..3), vec![]);
        // A subset: records held but not wanted split the runs; wanted ones missing are holes.
        assert_eq!(
            wanted_runs(&[10, 11, 12, 14, 15, 16], [10, 11, 13, 14, 16]),
            vec![(true, 0, 2), (false, 0, 1), (true, 3, 1), (true, 5, 1)]
        );
        assert_eq!(wanted_runs(&[1, 2, 3], [0, 4]), vec![(false, 0, 2)]);
        assert_eq!(wanted_runs(&[1, 2, 3], [2, 3]), vec![(true, 1, 2)]);
    }

    #[test]
    fn wanted_runs_expand_to_each_wanted_record_s_row_or_a_hole() {
        // Random chunks (ascending indices, gaps where records were skipped) against random
        // wanted sets: the runs, expanded, give each wanted record's row where the chunk holds
        // it and a hole where not, in order; runs of rows are maximal, no run is empty, and
        // no two hole runs touch.
        let mut next = lcg(11);
        for _ in 0..3000 {
            let indices: Vec<u64> = (0..30).filter(|_| !next().is_multiple_of(3)).collect();
            let wanted: Vec<u64> = (0..32).filter(|_| next().is_multiple_of(2)).collect();
            let runs = wanted_runs(&indices, wanted.iter().copied());
            let mut expanded = Vec::new();
            for &(held, start, len) in &runs {
                assert!(len > 0);
                for k in 0..len {
                    expanded.push(held.then(|| start + k));
                }
            }
            let want: Vec<Option<usize>> = wanted
                .iter()
                .map(|w| indices.iter().position(|i| i == w))
                .collect();
            assert_eq!(expanded, want, "{indices:?} {wanted:?}");
            for pair in runs.windows(2) {
                let ((a, sa, la), (b, sb, _)) = (pair[0], pair[1]);
                assert!(a || b, "two hole runs touch: {runs:?}");
                assert!(
                    !(a && b && sa + la == sb),
                    "a run of rows is split: {runs:?}"
                );
            }
        }
    }
}
