//! How large a block a piece of the Loader reads at once, when the Loader is left to choose
//! (`jaxrec/_loader/readers.py`'s `AUTO_CHUNK_BYTES`, `_AUTO_RECORDS`, `_AUTO_MAX_BYTES`, where
//! the reasons for the figures are; the Python stream applies the same rule).

/// The rule: blocks of at least `min` bytes, grown for large records until a block holds
/// `records` of them, up to `max` bytes.
#[derive(Clone, Copy, Debug)]
pub struct AutoBlocks {
    /// The smallest block.
    pub min: usize,
    /// Records a block is grown to hold.
    pub records: usize,
    /// The largest block.
    pub max: usize,
}

impl AutoBlocks {
    /// The next block's size after a block framed `framed` records of `nbytes` payload bytes in
    /// all; `None` when it framed none (the size stays).
    pub fn after(&self, nbytes: usize, framed: usize) -> Option<usize> {
        if framed == 0 {
            return None;
        }
        let per_record = nbytes as f64 / framed as f64;
        let want = (self.records as f64 * per_record).max(self.min as f64);
        Some(want.min(self.max as f64) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_grow_for_large_records_between_the_bounds() {
        let auto = AutoBlocks {
            min: (2 << 20) - (64 << 10),
            records: 48,
            max: 7 << 20,
        };
        assert_eq!(auto.after(3000 * 40, 3000), Some(auto.min)); // small records
        assert_eq!(auto.after(10 * 100_050, 10), Some(4_802_400)); // 48 of ~100 KB
        assert_eq!(auto.after(5 * 400_000, 5), Some(7 << 20)); // capped
        assert_eq!(auto.after(0, 0), None);
    }
}
