//! [`Block`]: a read block whose memory goes back to a small pool when the last chunk framed
//! from it is dropped, for the next block to be read into.
//!
//! A block is about `block_bytes` (1 MiB in the Loader), and the allocator serves sizes like
//! that with fresh pages from the kernel (glibc maps them, or trims them off the heap's top
//! once freed): every read then faulted in and zeroed 256 new pages before copying the file
//! into them. That was 6-8 % of the Loader's CPU; memory that was written before is free to
//! write again.
//!
//! The pool is small and global (chunks outlive their reader, and readers come and go with the
//! pieces they read): [`MAX_POOLED_BYTES`] at most, blocks of at most [`MAX_POOLED_BLOCK`]
//! bytes (a block grown for one huge record is freed), the smallest fitting one handed out first.

use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

/// Bytes the pool keeps at most, in all.
pub const MAX_POOLED_BYTES: usize = 32 << 20;
/// Capacity of the largest block the pool keeps.
pub const MAX_POOLED_BLOCK: usize = 8 << 20;
/// New blocks' capacities are rounded up to a multiple of this, so that blocks of one size
/// serve every later read of about that size. A read asks for the block size plus the tail of
/// the last block (a partial record); allocated exactly, each block fitted only reads with a
/// tail no longer than its own, and a third of the reads missed the pool.
pub const CAPACITY_STEP: usize = 64 << 10;

/// `bytes` rounded up to a multiple of [`CAPACITY_STEP`] (unchanged if that overflows).
pub fn rounded_capacity(bytes: usize) -> usize {
    bytes
        .checked_next_multiple_of(CAPACITY_STEP)
        .unwrap_or(bytes)
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    blocks: Vec::new(),
    bytes: 0,
});

struct Pool {
    blocks: Vec<Vec<u8>>,
    /// Capacity of `blocks`, summed.
    bytes: usize,
}

impl Pool {
    /// The smallest pooled allocation of at least `capacity` bytes, emptied; else a new,
    /// empty one.
    fn take(&mut self, capacity: usize) -> Vec<u8> {
        let fit = self
            .blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= capacity)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        match fit {
            Some(i) => {
                let b = self.blocks.swap_remove(i);
                self.bytes -= b.capacity();
                b
            }
            None => Vec::new(),
        }
    }

    /// Keeps `bytes`' allocation if it is within the limits.
    fn give(&mut self, mut bytes: Vec<u8>) {
        let cap = bytes.capacity();
        if cap > 0 && cap <= MAX_POOLED_BLOCK && self.bytes + cap <= MAX_POOLED_BYTES {
            bytes.clear();
            self.bytes += cap;
            self.blocks.push(bytes);
        }
    }
}

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    // Nothing can panic while the lock is held, so a poisoned pool is still consistent.
    POOL.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Bytes of a stream, read in one go; a pooled allocation is reused (see the module docs).
#[derive(Debug, Default)]
pub struct Block {
    bytes: Vec<u8>,
}

impl Block {
    /// An empty block with room for at least `capacity` bytes where the pool has one (else
    /// an empty one, for the caller to reserve into: fallibly, as a record decides the size).
    pub fn with_room(capacity: usize) -> Block {
        Block {
            bytes: pool().take(capacity),
        }
    }
}

impl Deref for Block {
    type Target = Vec<u8>;

    fn deref(&self) -> &Vec<u8> {
        &self.bytes
    }
}

impl DerefMut for Block {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        let bytes = std::mem::take(&mut self.bytes);
        if bytes.capacity() > 0 {
            pool().give(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> Pool {
        Pool {
            blocks: Vec::new(),
            bytes: 0,
        }
    }

    fn vec_of(capacity: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(capacity);
        v.extend_from_slice(b"old bytes");
        v
    }

    #[test]
    fn the_smallest_fitting_block_comes_back_empty() {
        let mut p = empty();
        p.give(vec_of(4 << 20));
        p.give(vec_of(1 << 20));
        p.give(vec_of(2 << 20));
        assert_eq!(p.bytes, 7 << 20);
        let b = p.take(1 << 20);
        assert!(b.is_empty() && b.capacity() >= 1 << 20 && b.capacity() < 2 << 20);
        assert_eq!(p.take(3 << 20).capacity(), 4 << 20);
        assert_eq!(p.take(3 << 20).capacity(), 0); // none fits: a new, empty one
        assert_eq!((p.blocks.len(), p.bytes), (1, 2 << 20));
    }

    #[test]
    fn rounded_capacities_serve_reads_with_any_tail() {
        let block = 2 << 20;
        assert_eq!(rounded_capacity(block), block);
        assert_eq!(rounded_capacity(block + 1), block + CAPACITY_STEP);
        assert_eq!(rounded_capacity(usize::MAX), usize::MAX);
        let mut p = empty();
        p.give(vec_of(rounded_capacity(block + 10)));
        assert!(
            p.take(block + 600).capacity() >= block + 600,
            "a longer tail still fits"
        );
    }

    #[test]
    fn the_pool_keeps_within_its_limits() {
        let mut p = empty();
        p.give(vec_of(MAX_POOLED_BLOCK + 1)); // one huge record's block: freed
        p.give(Vec::new());
        assert_eq!(p.bytes, 0);
        for _ in 0..MAX_POOLED_BYTES / MAX_POOLED_BLOCK + 3 {
            p.give(vec_of(MAX_POOLED_BLOCK));
        }
        assert_eq!(p.bytes, MAX_POOLED_BYTES);
        assert_eq!(p.bytes, p.blocks.iter().map(Vec::capacity).sum::<usize>());
    }
}
