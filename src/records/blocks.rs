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
//!
//! On Linux a block of about a multiple of 2 MiB is mapped for itself, aligned to 2 MiB and
//! asked to be backed by huge pages (`MADV_HUGEPAGE`): a batch's records are read from many
//! blocks (interleaved files, shuffled windows), and with 4 KiB pages nearly every record cost
//! the parse thread a TLB miss, as each block's pages did the kernel's copy into it. Tokens
//! Loader (2 threads, builds alternating): +3 % records a second in file order, +6 % over a
//! shuffle buffer of 20,000 records, CPU per record -3 % and -5 %. (Huge pages for every
//! allocation, `enabled=always`, had cost 6 % in file order.)

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::ops::Deref;
use std::sync::Mutex;

use super::compress::{read_once, read_steps, Input, DECODE_STEP};
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

/// The size of a huge page on x86-64 (and on aarch64 with 4 KiB pages).
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

/// The capacity of mapped pages for a block of `capacity` bytes, when it gets its own: from
/// 7/8 of a huge page up to [`MAX_POOLED_BLOCK`], and when rounding up to whole huge pages
/// adds at most an eighth (the Loader's blocks are 2 MiB less 64 KiB, for a record's tail).
#[cfg(target_os = "linux")]
fn pages_capacity(capacity: usize) -> Option<usize> {
    let cap = capacity.checked_next_multiple_of(HUGE_PAGE)?;
    let fits = capacity >= HUGE_PAGE / 8 * 7 && cap <= MAX_POOLED_BLOCK;
    (fits && cap - capacity <= capacity / 8).then_some(cap)
}

/// The error of a block that cannot have the memory a read needs.
fn out_of_memory(bytes: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::OutOfMemory,
        format!("cannot allocate {bytes} bytes of memory to read a record"),
    )
}

/// A block's memory: from the allocator, or (Linux) pages mapped for the block alone.
#[derive(Debug)]
enum Memory {
    Heap(Vec<u8>),
    #[cfg(target_os = "linux")]
    Pages(Pages),
}

impl Default for Memory {
    fn default() -> Self {
        Memory::Heap(Vec::new())
    }
}

impl Memory {
    fn capacity(&self) -> usize {
        match self {
            Memory::Heap(v) => v.capacity(),
            #[cfg(target_os = "linux")]
            Memory::Pages(p) => p.cap,
        }
    }

    fn len(&self) -> usize {
        match self {
            Memory::Heap(v) => v.len(),
            #[cfg(target_os = "linux")]
            Memory::Pages(p) => p.len,
        }
    }

    fn clear(&mut self) {
        match self {
            Memory::Heap(v) => v.clear(),
            #[cfg(target_os = "linux")]
            Memory::Pages(p) => p.len = 0,
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Memory::Heap(v) => v,
            #[cfg(target_os = "linux")]
            Memory::Pages(p) => p.as_slice(),
        }
    }

    /// Hands the (empty) memory's pages to the kernel to reclaim lazily.
    #[cfg(target_os = "linux")]
    fn lazily_free(&self) {
        // The advice's contract: the memory is the block's own, which nothing reads while
        // pooled; a read fills a block before anything reads it, so reclaimed pages (zeros)
        // are never seen.
        let ptr = match self {
            Memory::Heap(v) => v.as_ptr(),
            Memory::Pages(p) => p.ptr.as_ptr().cast_const(),
        };
        crate::alloc::lazily_free(ptr, self.capacity());
    }
}

/// Memory mapped for one block: `cap` bytes (whole huge pages) aligned to a huge page, of which
/// the first `len` hold the block. Like a `Vec<u8>` that the allocator does not serve: a `Vec`
/// cannot carry the 2 MiB alignment the kernel needs to back it with huge pages.
#[cfg(target_os = "linux")]
#[derive(Debug)]
struct Pages {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    cap: usize,
}

// SAFETY: `Pages` owns its mapping alone, as a `Vec<u8>` owns its buffer; `&Pages` reads only.
#[cfg(target_os = "linux")]
unsafe impl Send for Pages {}
// SAFETY: as above.
#[cfg(target_os = "linux")]
unsafe impl Sync for Pages {}

#[cfg(target_os = "linux")]
impl Pages {
    /// `cap` bytes (a multiple of [`HUGE_PAGE`]) mapped at a huge page's boundary and advised
    /// to be huge pages; `None` when the system has no memory to map.
    fn map(cap: usize) -> Option<Pages> {
        debug_assert!(cap > 0 && cap.is_multiple_of(HUGE_PAGE));
        // Mapped a huge page longer, then cut to the aligned `cap` bytes inside.
        let span = cap.checked_add(HUGE_PAGE)?;
        // SAFETY: a new anonymous private mapping; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let start = (base as usize).next_multiple_of(HUGE_PAGE);
        let head = start - base as usize;
        let tail = span - head - cap;
        // SAFETY: both ranges are page-aligned parts of the mapping just made, outside the
        // `cap` bytes kept; the advice only hints how to back the kept part.
        unsafe {
            if head > 0 {
                libc::munmap(base, head);
            }
            if tail > 0 {
                libc::munmap((start + cap) as *mut libc::c_void, tail);
            }
            // Without huge pages (disabled, none free) the mapping keeps small ones.
            libc::madvise(start as *mut libc::c_void, cap, libc::MADV_HUGEPAGE);
        }
        Some(Pages {
            ptr: std::ptr::NonNull::new(start as *mut u8)?,
            len: 0,
            cap,
        })
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: the first `len` of the mapping's `cap` bytes, which this owns.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The mapping after the block's bytes.
    fn spare(&mut self) -> &mut [u8] {
        // SAFETY: the rest of the mapping, owned by this and borrowed mutably through it. Every
        // byte of it is initialised: an anonymous mapping starts as zeros, and a page the
        // kernel reclaims after `MADV_FREE` reads as zeros again (or keeps what was written).
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(self.len), self.cap - self.len)
        }
    }
}

#[cfg(target_os = "linux")]
impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: the mapping `map` made, unmapped once (nothing borrows it any more).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.cap);
        }
    }
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    blocks: BTreeMap::new(),
    bytes: 0,
    loaders: Loaders::new(),
});

struct Pool {
    /// The pooled blocks by capacity: the smallest that fits is found without a scan (the
    /// pool may hold hundreds of small blocks: 128 MiB of 256 KiB ones).
    blocks: BTreeMap<usize, Vec<Memory>>,
    /// Their capacities, summed.
    bytes: usize,
    loaders: Loaders,
}

impl Pool {
    /// The smallest pooled allocation of at least `capacity` bytes, emptied; else a new,
    /// empty one.
    fn take(&mut self, capacity: usize) -> Memory {
        let Some(cap) = self.blocks.range(capacity..).next().map(|(&c, _)| c) else {
            return Memory::default();
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
    fn all(&self) -> impl Iterator<Item = &Memory> {
        self.blocks.values().flatten()
    }

    /// Keeps `bytes`' memory if it is within the limits.
    fn give(&mut self, mut bytes: Memory) {
        let cap = bytes.capacity();
        if cap > 0 && cap <= MAX_POOLED_BLOCK && self.bytes + cap <= MAX_POOLED_BYTES {
            bytes.clear();
            #[cfg(target_os = "linux")]
            if self.loaders.waiting() {
                bytes.lazily_free(); // as idle() left the others
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

/// The pool's lock, held until the value is dropped (`crate::idle`'s fork handlers: nothing
/// else holds it across a `fork()`).
pub struct Held {
    _lock: std::sync::MutexGuard<'static, Pool>,
}

/// Takes the pool's lock (see [`Held`]).
pub fn hold() -> Held {
    Held { _lock: pool() }
}

/// A Loader starts: pooled blocks serve its reads as they are (see [`idle`]).
pub fn in_use() {
    pool().loaders.start();
}

/// A Loader ends; true when none runs now (see [`crate::idle`]).
pub fn ended() -> bool {
    pool().loaders.end()
}

/// Once none runs (a moment after the last end, [`crate::idle`]), the pooled blocks stay
/// pooled, their pages the kernel's to reclaim when it needs memory (`MADV_FREE`; also those
/// of blocks given back later), as the spare batches' are (`alloc::spares::idle`); elsewhere
/// than Linux they are freed.
pub fn idle() {
    let mut p = pool();
    if !p.loaders.settle() {
        return;
    }
    #[cfg(target_os = "linux")]
    for b in p.all() {
        b.lazily_free();
    }
    #[cfg(not(target_os = "linux"))]
    {
        p.blocks.clear();
        p.bytes = 0;
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
    memory: Memory,
}

impl Block {
    /// An empty block with room for at least `capacity` bytes where the pool has one, or where
    /// the block is mapped for itself (see [`pages_capacity`]); else an empty one, for the
    /// caller to reserve into (fallibly, as a record decides the size).
    pub fn with_room(capacity: usize) -> Block {
        let memory = pool().take(capacity);
        #[cfg(target_os = "linux")]
        if memory.capacity() == 0 {
            if let Some(pages) = pages_capacity(capacity).and_then(Pages::map) {
                return Block {
                    memory: Memory::Pages(pages),
                };
            }
        }
        Block { memory }
    }

    /// Bytes the block holds.
    pub fn len(&self) -> usize {
        self.memory.len()
    }

    /// True when the block holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the block can hold without growing.
    pub fn capacity(&self) -> usize {
        self.memory.capacity()
    }

    /// The block's bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.memory.as_slice()
    }

    /// Makes room for `n` more bytes, failing (instead of aborting) when the memory is not
    /// there. Mapped pages too short become an allocation of exactly the room (their bytes
    /// copied, the pages pooled), as a `Vec` reserving exactly would.
    pub fn reserve(&mut self, n: usize) -> io::Result<()> {
        match &mut self.memory {
            Memory::Heap(v) => v.try_reserve_exact(n).map_err(|_| out_of_memory(n)),
            #[cfg(target_os = "linux")]
            Memory::Pages(p) => {
                let need = p.len.checked_add(n).ok_or_else(|| out_of_memory(n))?;
                if need <= p.cap {
                    return Ok(());
                }
                let mut v = Vec::new();
                v.try_reserve_exact(need).map_err(|_| out_of_memory(need))?;
                v.extend_from_slice(p.as_slice());
                let pages = std::mem::replace(&mut self.memory, Memory::Heap(v));
                pool().give(pages);
                Ok(())
            }
        }
    }

    /// Appends `bytes` (the room is reserved first).
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.reserve(bytes.len())?;
        match &mut self.memory {
            Memory::Heap(v) => v.extend_from_slice(bytes),
            #[cfg(target_os = "linux")]
            Memory::Pages(p) => {
                p.spare()[..bytes.len()].copy_from_slice(bytes);
                p.len += bytes.len();
            }
        }
        Ok(())
    }

    /// Appends up to `want` bytes of `input` (the room is reserved first); returns how many
    /// arrived (fewer: the stream ended). On an error the bytes read before it stay.
    ///
    /// A decompressed stream is read in the same steps whatever the memory (see
    /// [`read_steps`]): a decompressor that fails loses what it decoded in its failing read,
    /// so which records come before damage must not depend on what the pool handed out.
    pub fn fill(&mut self, input: &mut Input, want: usize) -> io::Result<usize> {
        self.reserve(want)?;
        match &mut self.memory {
            Memory::Heap(buf) => {
                let before = buf.len();
                // `read_to_end` reads into the reserved capacity without zeroing it first (a
                // plain file is read through its own reader for that: `Input` implements only
                // `read`, and a `read` alone makes the standard library zero the buffer before
                // each call); `take` keeps it from growing the buffer past `want`.
                let limit = want as u64;
                match input {
                    Input::Plain(r) => Read::take(&mut **r, limit).read_to_end(buf)?,
                    Input::Stream(r) => Read::take(&mut **r, limit).read_to_end(buf)?,
                    decoded => {
                        // In the steps pages take (`read_to_end` asks 8, 16, 32 KiB...): each
                        // a decoder step at most, zeroed just before (`read` needs it), so no
                        // more than a step is touched beyond what arrives (a record's declared
                        // length may ask far more than the stream holds).
                        let mut got = 0;
                        while got < want {
                            let at = before + got;
                            buf.resize(at + (want - got).min(DECODE_STEP), 0);
                            let read = read_once(decoded, &mut buf[at..]);
                            buf.truncate(at + *read.as_ref().unwrap_or(&0));
                            match read? {
                                0 => break,
                                k => got += k,
                            }
                        }
                        got
                    }
                };
                Ok(buf.len() - before)
            }
            #[cfg(target_os = "linux")]
            Memory::Pages(p) => {
                let (got, failed) = read_steps(input, &mut p.spare()[..want]);
                p.len += got;
                failed.map_or(Ok(got), Err)
            }
        }
    }
}

impl Deref for Block {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        let memory = std::mem::take(&mut self.memory);
        if memory.capacity() > 0 {
            pool().give(memory);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn empty() -> Pool {
        Pool {
            blocks: BTreeMap::new(),
            bytes: 0,
            loaders: Loaders::new(),
        }
    }

    fn vec_of(capacity: usize) -> Memory {
        let mut v = Vec::with_capacity(capacity);
        v.extend_from_slice(b"old bytes");
        Memory::Heap(v)
    }

    #[test]
    fn the_smallest_fitting_block_comes_back_empty() {
        let mut p = empty();
        p.give(vec_of(4 << 20));
        p.give(vec_of(1 << 20));
        p.give(vec_of(2 << 20));
        assert_eq!(p.bytes, 7 << 20);
        let b = p.take(1 << 20);
        assert!(b.len() == 0 && b.capacity() >= 1 << 20 && b.capacity() < 2 << 20);
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

    /// Once the last Loader's end has settled, pooled blocks stay pooled (their pages the
    /// kernel's to reclaim, on Linux), and so are blocks given back after it; until a Loader
    /// starts, while one of two still runs, and between the end and the settling, blocks are
    /// pooled as they are. Elsewhere the settling frees them.
    #[test]
    fn loaders_ending_leave_blocks_pooled_to_reclaim() {
        let mut p = empty();
        p.loaders.start();
        p.give(vec_of(1 << 20));
        p.loaders.start();
        assert!(!p.loaders.end(), "one Loader still runs");
        assert!(!p.loaders.settle(), "nothing settles while one runs");
        assert!(p.loaders.end(), "the last one ended");
        p.give(vec_of(1 << 20)); // given back before the memory settled: pooled as it is
        assert!(p.loaders.settle(), "the memory settles once none runs");
        assert!(!p.loaders.settle(), "and only once");
        p.give(vec_of(2 << 20)); // the consumer's last chunk, freed after the end
        let kept = if cfg!(target_os = "linux") { 3 } else { 2 };
        assert_eq!(p.all().count(), kept);
        p.loaders.start();
        assert!(!p.loaders.waiting());
        let memory = p.take(2 << 20);
        if cfg!(target_os = "linux") {
            assert_eq!(
                memory.capacity(),
                2 << 20,
                "a waiting block serves the next Loader"
            );
        }
        let mut b = Block { memory };
        b.extend_from_slice(b"read into it").unwrap();
        assert_eq!(&b[..], b"read into it");
    }

    /// Blocks about a multiple of 2 MiB get their own pages; others, or where rounding up
    /// would waste over an eighth, come from the allocator.
    #[cfg(target_os = "linux")]
    #[test]
    fn which_blocks_get_their_own_pages() {
        let mb = 1 << 20;
        assert_eq!(pages_capacity(2 * mb - 64 * 1024), Some(2 * mb)); // the Loader's
        assert_eq!(pages_capacity(2 * mb), Some(2 * mb));
        assert_eq!(pages_capacity(7_600_000), Some(8 * mb)); // large records' blocks
        assert_eq!(pages_capacity(7_000_000), None); // 8 MiB: over an eighth more
        assert_eq!(pages_capacity(2 * mb + 1), None); // 4 MiB for 2: too much waste
        assert_eq!(pages_capacity(mb), None);
        assert_eq!(pages_capacity(8 * mb + 1), None); // beyond what the pool keeps
        assert_eq!(pages_capacity(usize::MAX), None);
    }

    /// A stream that hands out at most `step` bytes a read, as pipes and sockets may.
    struct Trickle {
        bytes: io::Cursor<Vec<u8>>,
        step: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.step);
            self.bytes.read(&mut buf[..n])
        }
    }

    /// Mapped pages sit on a huge page's boundary, fill from a stream that answers in pieces
    /// (fewer bytes at its end), take a tail, and, grown past their capacity, become an
    /// allocation holding the same bytes.
    #[cfg(target_os = "linux")]
    #[test]
    fn mapped_blocks_read_and_grow_like_vecs() {
        let stream: Vec<u8> = (0..3 << 20).map(|i: usize| (i * 31 % 251) as u8).collect();
        let mut input = Input::Stream(Box::new(Trickle {
            bytes: io::Cursor::new(stream.clone()),
            step: 100_000,
        }));
        // (Not through `with_room`: the pool is the process's, and other tests fill it.)
        let pages = Pages::map(HUGE_PAGE).expect("2 MiB to map");
        assert_eq!(
            (pages.ptr.as_ptr() as usize % HUGE_PAGE, pages.cap),
            (0, HUGE_PAGE)
        );
        let mut b = Block {
            memory: Memory::Pages(pages),
        };
        b.extend_from_slice(b"tail").unwrap();
        assert_eq!(b.fill(&mut input, 1 << 20).unwrap(), 1 << 20);
        assert_eq!(&b[..4], b"tail");
        assert_eq!(&b[4..], &stream[..1 << 20]);
        // Past the capacity: an allocation of exactly what is needed, the bytes kept.
        assert_eq!(
            b.fill(&mut input, 3 << 20).unwrap(),
            2 << 20,
            "the stream's rest"
        );
        assert!(matches!(b.memory, Memory::Heap(_)));
        assert_eq!(b.len(), 4 + (3 << 20));
        assert_eq!(&b[4..], &stream[..]);
        assert_eq!(b.fill(&mut input, 10).unwrap(), 0, "at the end");
    }

    /// A damaged GZIP stream gives the same bytes before its damage into mapped pages as into
    /// an allocation: the decoder's failing read loses what it decoded, so both read it in the
    /// same steps (the allocation's `read_to_end` had asked 8, 16, 32 KiB... and lost other
    /// records than the pages' 64 KiB steps).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_damaged_stream_reads_alike_into_any_memory() {
        use std::io::Write;
        let data: Vec<u8> = (0..600_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(&data[..300_000]).unwrap();
        enc.flush().unwrap(); // ends the deflate block on a byte boundary
        let head = enc.get_ref().len();
        enc.write_all(&data[300_000..]).unwrap();
        let mut gz = enc.finish().unwrap();
        gz[head] |= 0b110; // the next block's type: reserved, a decoder fails right there
        let read = |memory: Memory| {
            let name = std::path::Path::new("d.gz");
            let mut src =
                super::super::compress::open_stream(io::Cursor::new(gz.clone()), name, None, None)
                    .unwrap();
            let mut b = Block { memory };
            assert!(
                b.fill(&mut src.input, 1 << 20).is_err(),
                "the damage fails the read"
            );
            b.as_slice().to_vec()
        };
        let heap = read(Memory::Heap(Vec::new()));
        let pages = read(Memory::Pages(Pages::map(HUGE_PAGE).expect("2 MiB to map")));
        assert!(!heap.is_empty() && heap.len() <= 300_000);
        assert_eq!(heap, &data[..heap.len()]);
        assert_eq!(pages, heap);
    }

    #[test]
    fn the_pool_keeps_within_its_limits() {
        let mut p = empty();
        p.give(vec_of(MAX_POOLED_BLOCK + 1)); // one huge record's block: freed
        p.give(Memory::default());
        assert_eq!(p.bytes, 0);
        for _ in 0..MAX_POOLED_BYTES / MAX_POOLED_BLOCK + 3 {
            p.give(vec_of(MAX_POOLED_BLOCK));
        }
        assert_eq!(p.bytes, MAX_POOLED_BYTES);
        assert_eq!(p.bytes, p.all().map(Memory::capacity).sum::<usize>());
    }
}
