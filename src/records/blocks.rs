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

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

use crate::alloc::Loaders;

/// Bytes the pool keeps at most, in all.
///
/// Why this many: a Loader holds about 70 MB of blocks at its peak (8 files, each read one
/// block ahead, the chunks of the batches in flight), and the chunk registry drops a third of
/// them at once when it collects: with 32 MiB, what did not fit went back to glibc, whose heaps
/// gave it to the kernel, and the reads after refilled fresh pages (16 page faults a tokens
/// batch in a process that had run other work, against 9 with 128 MiB). Once no Loader runs,
/// the kernel may reclaim the pool's pages ([`idle`]).
pub const MAX_POOLED_BYTES: usize = 128 << 20;
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
    blocks: BTreeMap::new(),
    bytes: 0,
    loaders: Loaders::new(),
});

struct Pool {
    /// The pooled blocks by capacity: the smallest that fits is found without a scan (the
    /// pool may hold hundreds of small blocks: 128 MiB of 256 KiB ones).
    blocks: BTreeMap<usize, Vec<Vec<u8>>>,
    /// Their capacities, summed.
    bytes: usize,
    loaders: Loaders,
}

impl Pool {
    /// The smallest pooled allocation of at least `capacity` bytes, emptied; else a new,
    /// empty one.
    fn take(&mut self, capacity: usize) -> Vec<u8> {
        let Some(cap) = self.blocks.range(capacity..).next().map(|(&c, _)| c) else {
            return Vec::new();
        };
        let same = self.blocks.get_mut(&cap).expect("the capacity just found");
        let b = same
            .pop()
            .expect("a capacity is listed while it has blocks");
        if same.is_empty() {
            self.blocks.remove(&cap);
        }
        self.bytes -= b.capacity();
        b
    }

    /// Every pooled block.
    fn all(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.blocks.values().flatten()
    }

    /// Keeps `bytes`' allocation if it is within the limits.
    fn give(&mut self, mut bytes: Vec<u8>) {
        let cap = bytes.capacity();
        if cap > 0 && cap <= MAX_POOLED_BLOCK && self.bytes + cap <= MAX_POOLED_BYTES {
            bytes.clear();
            #[cfg(target_os = "linux")]
            if self.loaders.waiting() {
                lazily_free(&bytes); // as idle() left the others
            }
            #[cfg(not(target_os = "linux"))]
            if self.loaders.waiting() {
                return; // freed, as idle() frees the others
            }
            self.bytes += cap;
            self.blocks.entry(cap).or_default().push(bytes);
        }
    }
}

/// A Loader starts: pooled blocks serve its reads as they are, until its [`idle`].
pub fn in_use() {
    pool().loaders.start();
}

/// A Loader ends. Once none runs, the pooled blocks stay pooled, their pages the kernel's to
/// reclaim when it needs memory (`MADV_FREE`; also those of blocks given back later), as the
/// spare batches' are (`alloc::spares::idle`); elsewhere than Linux they are freed.
pub fn idle() {
    let mut p = pool();
    if !p.loaders.end() {
        return;
    }
    #[cfg(target_os = "linux")]
    for b in p.all() {
        lazily_free(b);
    }
    #[cfg(not(target_os = "linux"))]
    {
        p.blocks.clear();
        p.bytes = 0;
    }
}

/// Hands an empty pooled block's pages to the kernel to reclaim lazily.
#[cfg(target_os = "linux")]
fn lazily_free(block: &Vec<u8>) {
    // The advice's contract: the block's own allocation, which nothing reads while pooled; a
    // read fills a block before anything reads it, so reclaimed pages (zeros) are never seen.
    crate::alloc::lazily_free(block.as_ptr(), block.capacity());
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
            blocks: BTreeMap::new(),
            bytes: 0,
            loaders: Loaders::new(),
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
        assert_eq!((p.all().count(), p.bytes), (1, 2 << 20));
        // Blocks of one capacity serve one take each.
        p.give(vec_of(1 << 20));
        p.give(vec_of(1 << 20));
        assert_eq!(p.take(1 << 20).capacity(), 1 << 20);
        assert_eq!(p.take(1 << 20).capacity(), 1 << 20);
        assert_eq!(p.take(1 << 20).capacity(), 2 << 20);
        assert_eq!((p.all().count(), p.bytes, p.blocks.len()), (0, 0, 0));
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

    /// A Loader's end leaves pooled blocks pooled (their pages the kernel's to reclaim, on
    /// Linux), and so are blocks given back after it; until a Loader starts, and while one of
    /// two still runs, blocks are pooled as they are. Elsewhere the end frees them.
    #[test]
    fn loaders_ending_leave_blocks_pooled_to_reclaim() {
        let mut p = empty();
        p.loaders.start();
        p.give(vec_of(1 << 20));
        p.loaders.start();
        assert!(!p.loaders.end(), "one Loader still runs");
        assert!(p.loaders.end(), "the last one ended");
        p.give(vec_of(2 << 20)); // the consumer's last chunk, freed after the end
        let kept = if cfg!(target_os = "linux") { 2 } else { 1 };
        assert_eq!(p.all().count(), kept);
        p.loaders.start();
        assert!(!p.loaders.waiting());
        let mut b = p.take(2 << 20);
        if cfg!(target_os = "linux") {
            assert_eq!(
                b.capacity(),
                2 << 20,
                "a waiting block serves the next Loader"
            );
        }
        b.extend_from_slice(b"read into it");
        assert_eq!(&b[..], b"read into it");
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
        assert_eq!(p.bytes, p.all().map(Vec::capacity).sum::<usize>());
    }
}
