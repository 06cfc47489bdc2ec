//! Allocations whose size a record decides: checked against [`MAX_ROW_BYTES`] where one row's
//! size comes from the data, and made fallibly (`try_reserve`) everywhere, so that an
//! impossible size is an error naming the feature rather than Rust's "memory allocation of N
//! bytes failed" and an abort that no `except` can catch.
//!
//! What the limits cover (the parser and every decoder):
//!
//! - one row of a batch column, padded (a VarLen or sequence row padded to the batch's longest,
//!   a decoded tensor padded to its batch shape, one image), and each buffer a decoder fills for
//!   one value (a PNG frame, a JPEG's pixels, a tensor's elements): at most [`MAX_ROW_BYTES`];
//! - the batch: `rows x row` bytes, allocated fallibly; a batch the machine cannot hold is an
//!   error, never an abort.

use std::alloc::{alloc_zeroed, GlobalAlloc, Layout, System};
use std::fmt;

/// The allocator of Rust's allocations in this library (`#[global_allocator]` in `lib.rs`):
/// those under [`SMALL_BYTES`] come from mimalloc, larger ones from the system's `malloc`
/// (glibc's on Linux). Python's and numpy's own allocations are not Rust's and keep the
/// system's.
///
/// Why mimalloc for small ones: a batch's small allocations (a tabular batch's 40 columns of
/// 1-2 KiB, their shapes, the parse's tables) are made on a parse thread and freed on the
/// consumer's. glibc puts a chunk freed by another thread back into its arena under the arena's
/// lock, which the parse thread allocating from it contends for: glibc's allocator functions
/// were ~12 % of a tabular Loader's CPU samples (`perf`), ~3 % with this. mimalloc frees
/// another thread's block onto a lock-free list of its page. Tabular Loader +15 % (3.76 ->
/// 4.34M records a second, alternating processes), tokens +2 %.
///
/// Why not for all sizes: with every allocation from mimalloc the images Loader ran 10 %
/// slower (7.2-7.4k against 8.1-8.3k images a second): the decoder's large buffers came back
/// as fresh pages more often (the kernel's page clearing 7 % of the samples against 5 %), and
/// the decode itself was slower. Large batch columns reuse memory through [`spares`] anyway.
///
/// mimalloc is built with `local_dynamic_tls`: Python loads this library with `dlopen`, and
/// mimalloc's default (initial-exec) thread-local storage needs static TLS space that a process
/// which loaded other large libraries first may not have left ("cannot allocate memory in
/// static TLS block"). It measured no slower.
pub struct SplitAllocator;

/// Allocations of fewer bytes come from mimalloc (see [`SplitAllocator`]): also the size below
/// which [`spares`] keeps nothing, as the allocator reuses memory of those sizes itself.
pub const SMALL_BYTES: usize = 64 << 10;

// SAFETY: each call goes to one of two allocators by the layout's size, and every size that a
// block has (at allocation, at `dealloc`, before and after `realloc`) picks the same one, so a
// block is freed or resized by the allocator that made it; where a `realloc` crosses
// SMALL_BYTES, the block moves (a new one from the other allocator, the bytes copied, the old
// one freed by its own).
unsafe impl GlobalAlloc for SplitAllocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() < SMALL_BYTES {
            mimalloc::MiMalloc.alloc(layout)
        } else {
            System.alloc(layout)
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() < SMALL_BYTES {
            mimalloc::MiMalloc.alloc_zeroed(layout)
        } else {
            System.alloc_zeroed(layout)
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() < SMALL_BYTES {
            mimalloc::MiMalloc.dealloc(ptr, layout)
        } else {
            System.dealloc(ptr, layout)
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match (layout.size() < SMALL_BYTES, new_size < SMALL_BYTES) {
            (true, true) => mimalloc::MiMalloc.realloc(ptr, layout, new_size),
            (false, false) => System.realloc(ptr, layout, new_size),
            _ => {
                // SAFETY: the caller guarantees that `new_size`, rounded up to the alignment,
                // does not overflow `isize`, which is all a Layout asks.
                let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
                let new = self.alloc(new_layout);
                if !new.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                new
            }
        }
    }
}

/// One row of a column, or one decoded value's buffer, may hold at most this many bytes
/// (1 GiB; README: "a decoded tensor row is capped at 1 GiB").
pub const MAX_ROW_BYTES: usize = 1 << 30;

/// An allocation that was refused: what it asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocError {
    /// Elements asked for.
    pub len: usize,
    /// Their size in bytes, `None` when it overflows.
    pub bytes: Option<usize>,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.bytes {
            Some(b) => write!(f, "cannot allocate {b} bytes ({} elements)", self.len),
            None => write!(
                f,
                "cannot allocate {} elements (the size overflows)",
                self.len
            ),
        }
    }
}

/// `vec![value; len]`, or an [`AllocError`] when the memory cannot be had.
#[inline]
pub fn try_filled<T: Clone>(len: usize, value: T) -> Result<Vec<T>, AllocError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| AllocError {
        len,
        bytes: len.checked_mul(std::mem::size_of::<T>()),
    })?;
    v.resize(len, value);
    Ok(v)
}

/// Element types whose all-zero bit pattern is a valid value (`0`, `0.0`, `false`).
///
/// # Safety
///
/// Implement it only for types for which every byte being zero is a valid value, and with
/// [`ZeroBits::ANY_BITS`] true only for types without invalid bit patterns or padding.
pub unsafe trait ZeroBits: Copy {
    /// Whether every bit pattern is a valid value (integers and floats; not `bool`): an
    /// earlier batch's bytes may then be reused as these (see [`spares`]).
    const ANY_BITS: bool;

    /// Whether this value's bits are all zero (`-0.0` is not).
    fn is_zero_bits(&self) -> bool;
}

macro_rules! zero_bits {
    ($($t:ty, $any:expr => |$v:ident| $e:expr),* $(,)?) => {$(
        // SAFETY: an all-zero bit pattern is 0, 0.0 or false: a valid value of the type; and
        // every bit pattern of an integer or float (or of f16/bf16's u16) is one of its values.
        unsafe impl ZeroBits for $t {
            const ANY_BITS: bool = $any;

            #[inline(always)]
            fn is_zero_bits(&self) -> bool {
                let $v = *self;
                $e
            }
        }
    )*};
}
zero_bits!(
    i8, true => |v| v == 0, i16, true => |v| v == 0, i32, true => |v| v == 0,
    i64, true => |v| v == 0, u8, true => |v| v == 0, u16, true => |v| v == 0,
    u32, true => |v| v == 0, u64, true => |v| v == 0,
    bool, false => |v| !v,
    f32, true => |v| v.to_bits() == 0, f64, true => |v| v.to_bits() == 0,
    half::f16, true => |v| v.to_bits() == 0, half::bf16, true => |v| v.to_bits() == 0,
);

/// `len` zeros from fresh zeroed memory (what `vec![0; len]` does, without aborting): the
/// operating system hands out zero pages that cost nothing until written, so a batch padded
/// to a long row takes the memory of what is written into it, not of its padding.
pub fn try_zeroed<T: ZeroBits>(len: usize) -> Result<Vec<T>, AllocError> {
    let err = || AllocError {
        len,
        bytes: len.checked_mul(std::mem::size_of::<T>()),
    };
    if len == 0 || std::mem::size_of::<T>() == 0 {
        return Ok(Vec::new());
    }
    let layout = Layout::array::<T>(len).map_err(|_| err())?;
    // SAFETY: `layout` has a non-zero size (len > 0 and T is not zero-sized).
    let ptr = unsafe { alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        return Err(err());
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of `len` Ts (which
    // `Vec` will free it with), and holds `len` initialised values: all-zero bits, a valid T.
    Ok(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

/// [`try_zeroed`] for a batch its decoder writes (nearly) whole: decoded images and tensors.
/// Large ones are backed by huge pages.
///
/// Why: a batch of 256 224x224x3 images is 38.5 MB, above glibc's largest mmap threshold, so
/// every batch is fresh pages, and faulting them in 4 KiB at a time (a fault, a page-table
/// lock and a memory-cgroup charge each) took a fifth of the Loader's CPU on raw pixels
/// (`perf`); huge pages take 512 times fewer faults. Only for dense batches: a parsed column
/// padded to a long row touches a few pages of each row, and huge pages would make it take
/// (and zero) the memory of its padding too.
pub fn try_zeroed_dense<T: ZeroBits>(len: usize) -> Result<Vec<T>, AllocError> {
    let v = try_zeroed::<T>(len)?;
    advise_huge_pages(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v.as_slice()));
    Ok(v)
}

/// A batch a decoder writes row by row: fresh zeros, or a *spare* (the memory of an earlier
/// batch of the same size that Python has freed, see [`spares`]) whose rows still hold that
/// batch's values. A decoder writes each row whole through [`DenseBatch::row`], or takes it
/// zeroed through [`DenseBatch::zeroed_row`] where it writes only part of it (padding, a row
/// that failed).
pub struct DenseBatch<T> {
    values: Vec<T>,
    per_row: usize,
    fresh: bool,
}

impl<T: ZeroBits + Default> DenseBatch<T> {
    /// `len` elements in rows of `per_row`: a spare of that size if one is kept (and `T` may
    /// hold any bits), else fresh zeros on huge pages ([`try_zeroed_dense`]).
    pub fn new(len: usize, per_row: usize) -> Result<Self, AllocError> {
        let (values, fresh) = match spares::take::<T>(len) {
            Some(values) => (values, false),
            None => (try_zeroed_dense(len)?, true),
        };
        Ok(DenseBatch {
            values,
            per_row,
            fresh,
        })
    }

    /// Row `row`, as it is: the caller writes every element of it.
    #[inline]
    pub fn row(&mut self, row: usize) -> &mut [T] {
        let n = self.per_row;
        &mut self.values[row * n..(row + 1) * n]
    }

    /// Row `row`, zeros (cleared here if the batch is a spare).
    #[inline]
    pub fn zeroed_row(&mut self, row: usize) -> &mut [T] {
        let fresh = self.fresh;
        let dst = self.row(row);
        if !fresh {
            dst.fill(T::default()); // every ZeroBits type's default is its zero
        }
        dst
    }

    /// Row `row` for a caller that writes all of it (`whole`: as it is) or only part (zeroed).
    #[inline]
    pub fn row_for(&mut self, row: usize, whole: bool) -> &mut [T] {
        if whole {
            self.row(row)
        } else {
            self.zeroed_row(row)
        }
    }

    /// The values, row-major.
    pub fn into_vec(self) -> Vec<T> {
        self.values
    }
}

/// Spare batches: the memory of batch columns that Python has freed (decoded images and
/// tensors, parsed numbers), kept for the next column of the same size.
///
/// Why: a batch of 256 224x224x3 images is 38.5 MB, above glibc's largest mmap threshold, so
/// each batch was fresh memory that the kernel zeroed page by page before the decoder wrote
/// over it (`clear_page_erms`, 10 % of the JPEG Loader's CPU, and the same DRAM traffic again
/// as the pixels); smaller parsed columns fared alike (see [`MIN_BYTES`]). Decoded batches are
/// written whole, so a spare needs no zeroing; a parsed column writes each row's padding after
/// its values ([`super::try_reusing`]), or fills the spare with it first where a fill writes
/// only values ([`super::try_filled_reusing`]). A numpy array over such a column owns its memory as a
/// [`Spare`] and [`give`]s it back here when it is freed (`python::parser::BatchMemory`); few
/// are kept ([`MAX_SPARES`], [`MAX_LARGE_SPARES`], [`MAX_BYTES`]), the oldest dropped first.
/// A Loader's start calls [`in_use`] and its end [`idle`]: once no Loader runs, the kernel may
/// take the spares' pages back when it needs memory (also those of batches freed after that,
/// such as the consumer's last), and the next Loader reuses what it has not taken;
/// [`release`] frees them outright.
pub mod spares {
    use std::alloc::{dealloc, Layout};
    use std::collections::VecDeque;
    use std::ptr::NonNull;
    use std::sync::Mutex;

    use super::ZeroBits;

    /// Spares kept at most (and [`MAX_BYTES`]). The Loader's planner queues its parses a group
    /// at a time (up to 64 batches, `pipeline._MAX_GROUP`), so the batches in flight rise by up
    /// to a group and fall back as the consumer takes them: the pool must hold a group's
    /// columns, or each rise takes fresh memory. Kept at 16, a third of the tokens columns
    /// (256 KiB) missed the pool and were zeroed anew by `calloc`; at 192 (three groups, for
    /// a batch with a few columns of one size: tokens, their segment ids and positions) under
    /// 100 of ~5,900 missed, and the Loader took 0.5 page faults a batch instead of 1-2.
    pub const MAX_SPARES: usize = 192;
    /// Spares of [`LARGE_BYTES`] or more kept at most (decoded images: 38.5 MB a batch).
    pub const MAX_LARGE_SPARES: usize = 4;
    /// What counts as a large spare.
    pub const LARGE_BYTES: usize = super::HUGE_PAGE_MIN_BYTES;
    /// Bytes kept at most.
    pub const MAX_BYTES: usize = 512 << 20;
    /// Smaller batches are not kept: the allocator (mimalloc, [`SplitAllocator`](super::SplitAllocator))
    /// keeps and reuses memory of their size.
    ///
    /// Why not larger (4 MiB, decoded batches only, until this was measured): glibc does not
    /// keep columns of a few hundred KiB for long either. Freed by the consumer into the
    /// parse threads' heaps, the heaps' free tops go back to the kernel, and the columns came
    /// again from fresh pages: a tokens column is 256 KiB (256 rows of 256 int32), and in a
    /// process that has run other work (tf.data, here) the Loader took 7 page faults a batch
    /// for them, the kernel's zeroing of the pages (`clear_page_erms`) a tenth of the parse
    /// threads' time.
    pub const MIN_BYTES: usize = super::SMALL_BYTES;

    /// An allocation taken out of a `Vec` (its values left in it), with the layout the global
    /// allocator frees it with; dropping it frees it.
    #[derive(Debug)]
    pub struct Spare {
        ptr: NonNull<u8>,
        layout: Layout,
    }

    // SAFETY: a Spare owns its allocation alone (it came out of a Vec no one else holds);
    // moving it between threads moves that ownership.
    unsafe impl Send for Spare {}
    // SAFETY: nothing reads or writes the memory through `&Spare`; `as_ptr` hands out a raw
    // pointer, whose users answer for their own accesses.
    unsafe impl Sync for Spare {}

    impl Spare {
        /// `v`'s allocation, its values kept; `None` for a Vec that allocated nothing.
        pub fn from_vec<T>(v: Vec<T>) -> Option<Spare> {
            let layout = Layout::array::<T>(v.capacity()).ok()?;
            if layout.size() == 0 {
                return None;
            }
            let mut v = std::mem::ManuallyDrop::new(v);
            // SAFETY: the pointer of a Vec with a non-zero capacity is its allocation's.
            let ptr = unsafe { NonNull::new_unchecked(v.as_mut_ptr().cast::<u8>()) };
            Some(Spare { ptr, layout })
        }

        /// Where the memory starts.
        pub fn as_ptr(&self) -> *mut u8 {
            self.ptr.as_ptr()
        }

        /// Its size in bytes.
        pub fn bytes(&self) -> usize {
            self.layout.size()
        }
    }

    impl Drop for Spare {
        fn drop(&mut self) {
            // SAFETY: `ptr` was allocated by the global allocator with `layout` (a Vec's
            // capacity and alignment) and is owned by this Spare alone.
            unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
        }
    }

    /// The spares, and whether the Loaders that reuse them run: one lock for both, so that a
    /// Loader starting while another ends sees one or the other state, never half of each.
    struct Kept {
        spares: VecDeque<Spare>,
        loaders: super::Loaders,
    }

    static KEPT: Mutex<Kept> = Mutex::new(Kept {
        spares: VecDeque::new(),
        loaders: super::Loaders::new(),
    });

    fn kept() -> std::sync::MutexGuard<'static, Kept> {
        // A panic while the lock was held left nothing half-done: the state is whole.
        KEPT.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `spare` for a later batch of its size, or frees it (too small or too large; over
    /// the limits the oldest spares go first).
    pub fn give(spare: Spare) {
        if spare.bytes() < MIN_BYTES || spare.bytes() > MAX_BYTES {
            return; // dropped: freed as usual
        }
        let mut evicted = Vec::new();
        {
            let mut k = kept();
            if k.loaders.waiting() {
                #[cfg(target_os = "linux")]
                super::lazily_free(spare.as_ptr(), spare.bytes());
                #[cfg(not(target_os = "linux"))]
                {
                    drop(k);
                    return; // freed, as idle() frees the others
                }
            }
            let q = &mut k.spares;
            q.push_back(spare);
            let mut bytes: usize = q.iter().map(Spare::bytes).sum();
            loop {
                let large = q.iter().filter(|s| s.bytes() >= LARGE_BYTES);
                // The oldest large one when too many are large, else the oldest of all.
                let at = if large.count() > MAX_LARGE_SPARES {
                    q.iter().position(|s| s.bytes() >= LARGE_BYTES)
                } else if q.len() > MAX_SPARES || bytes > MAX_BYTES {
                    Some(0)
                } else {
                    None
                };
                let Some(old) = at.and_then(|at| q.remove(at)) else {
                    break;
                };
                bytes -= old.bytes();
                evicted.push(old);
            }
        }
        drop(evicted); // freed outside the lock
    }

    /// A kept allocation of exactly `len` `T`s, if there is one and `T` may hold any bits
    /// ([`ZeroBits::ANY_BITS`]); its values are an earlier batch's.
    pub fn take<T: ZeroBits>(len: usize) -> Option<Vec<T>> {
        if !T::ANY_BITS {
            return None;
        }
        let layout = Layout::array::<T>(len).ok()?;
        if layout.size() < MIN_BYTES {
            return None;
        }
        let spare = {
            let q = &mut kept().spares;
            let at = q.iter().rposition(|s| s.layout == layout)?;
            q.remove(at)?
        };
        let spare = std::mem::ManuallyDrop::new(spare);
        // SAFETY: the memory was allocated by the global allocator with the layout of `len`
        // Ts (size and alignment compared above), which is how this Vec frees it; it holds
        // initialised bytes (an earlier batch's), every pattern of which is a valid T
        // (`ANY_BITS`); the Spare that owned it is forgotten, so it has one owner.
        Some(unsafe { Vec::from_raw_parts(spare.ptr.as_ptr().cast::<T>(), len, len) })
    }

    /// Frees every kept spare.
    pub fn release() {
        let all: Vec<Spare> = kept().spares.drain(..).collect();
        drop(all);
    }

    /// A Loader ends; true when none runs now (see [`crate::idle`]).
    pub fn ended() -> bool {
        kept().loaders.end()
    }

    /// The kept spares wait for a later Loader once none runs (called a moment after the last
    /// end, [`crate::idle`]): on Linux they stay kept, their pages given to the kernel to
    /// reclaim lazily (`MADV_FREE`): under memory pressure it takes them without writing them
    /// anywhere, and a later batch written there gets fresh zero pages as before; otherwise the
    /// next Loader's batches reuse them as they are. Freed at once, every short Loader in a row
    /// (an eval loop, a benchmark's passes) paid fresh, zeroed pages for its first batches: ~5 %
    /// of a one-epoch JPEG pass of 16 batches. Elsewhere they are freed ([`release`]).
    ///
    /// While a Loader runs, its batches are about to reuse the spares, which are left as
    /// they are.
    pub fn idle() {
        let mut k = kept();
        if !k.loaders.settle() {
            return;
        }
        // The advice's contract: each spare is its own allocation, which nothing reads or
        // writes while it is kept; once reclaimed its pages read as zeros, and every batch
        // writes its memory whole before it is read.
        #[cfg(target_os = "linux")]
        for s in &k.spares {
            super::lazily_free(s.as_ptr(), s.bytes());
        }
        #[cfg(not(target_os = "linux"))]
        {
            drop(k);
            release();
        }
    }

    /// The spares' lock, held until the value is dropped (`crate::idle`'s fork handlers:
    /// nothing else holds it across a `fork()`).
    pub struct Held {
        _lock: std::sync::MutexGuard<'static, Kept>,
    }

    /// Takes the spares' lock (see [`Held`]).
    pub fn hold() -> Held {
        Held { _lock: kept() }
    }

    /// A Loader starts: the spares serve its batches as they are (see [`idle`]).
    pub fn in_use() {
        kept().loaders.start();
    }

    /// How many spares are kept, and their bytes.
    pub fn held() -> (usize, usize) {
        let q = &kept().spares;
        (q.len(), q.iter().map(Spare::bytes).sum())
    }
}

/// How many Loaders run, for memory kept between batches ([`spares`], the read blocks' pool):
/// kept as it is while one runs, handed to the kernel to reclaim lazily once none does and
/// the memory has settled (see [`crate::idle`]: a moment after the last end, not at it).
#[derive(Debug)]
pub struct Loaders {
    /// Loaders running: between their start and end.
    running: usize,
    /// None runs and the memory has settled since the last end: memory given back now (a
    /// batch the consumer still held at the end, freed later) waits as the rest was left.
    /// False before any Loader, so work outside one keeps its memory as it is.
    waiting: bool,
}

impl Loaders {
    /// None has run yet.
    pub const fn new() -> Self {
        Loaders {
            running: 0,
            waiting: false,
        }
    }

    /// A Loader starts.
    pub fn start(&mut self) {
        self.running += 1;
        self.waiting = false;
    }

    /// A Loader ends; true when it was the last one running (the memory may then settle).
    pub fn end(&mut self) -> bool {
        self.running = self.running.saturating_sub(1);
        self.running == 0
    }

    /// The memory settles where none runs: true when it has just begun to wait (advise it
    /// now), false where a Loader runs or it waits already.
    pub fn settle(&mut self) -> bool {
        if self.running > 0 || self.waiting {
            return false;
        }
        self.waiting = true;
        true
    }

    /// Whether memory given back now waits for a later Loader (see [`Loaders::settle`]).
    pub fn waiting(&self) -> bool {
        self.waiting
    }
}

impl Default for Loaders {
    fn default() -> Self {
        Self::new()
    }
}

/// Hands the whole pages of the allocation `[ptr, ptr + bytes)` to the kernel to reclaim when
/// it needs memory (`MADV_FREE`): it takes them without writing them anywhere, and they read
/// as zeros once it has; until then they hold what they held.
///
/// The caller answers for the memory being its own and read by nothing that expects its old
/// contents after a reclaim.
#[cfg(target_os = "linux")]
pub fn lazily_free(ptr: *const u8, bytes: usize) {
    advise_inside(ptr, bytes, page_size(), libc::MADV_FREE);
}

/// Whether a parsed column of `bytes` recycles its memory through [`spares`]: from
/// [`spares::MIN_BYTES`] up to below [`spares::LARGE_BYTES`]. Larger ones keep fresh zero
/// pages: a column padded to a long row then takes the memory of what is written into it, not
/// of its padding (see [`try_zeroed`]), where a spare would be filled whole.
pub fn recycles_parsed(bytes: usize) -> bool {
    (spares::MIN_BYTES..spares::LARGE_BYTES).contains(&bytes)
}

/// `len` copies of `fill`: in a kept spare of that size (see [`spares`]) if there is one and a
/// parsed column of that size recycles memory ([`recycles_parsed`]), else as
/// [`try_filled_zeroable`].
pub fn try_filled_reusing<T: ZeroBits>(len: usize, fill: T) -> Result<Vec<T>, AllocError> {
    match take_parsed_spare(len) {
        Some(mut v) => {
            v.fill(fill);
            Ok(v)
        }
        None => try_filled_zeroable(len, fill),
    }
}

/// A kept spare of `len` `T`s for a parsed column, as an earlier batch left it, where a
/// column of that size recycles memory ([`recycles_parsed`]) and one is kept.
fn take_parsed_spare<T: ZeroBits>(len: usize) -> Option<Vec<T>> {
    let bytes = len.saturating_mul(std::mem::size_of::<T>());
    recycles_parsed(bytes)
        .then(|| spares::take::<T>(len))
        .flatten()
}

/// `len` elements for a caller that writes every one itself: a kept spare as an earlier batch
/// left it (see [`spares`]) where a parsed column of that size recycles memory
/// ([`recycles_parsed`]), else fresh zeros; and whether they are zeros. Where they are, padding
/// of zero bits need not be written: a column padded to a long row then takes the memory of
/// its values, not of its padding (see [`try_zeroed`]).
pub fn try_reusing<T: ZeroBits>(len: usize) -> Result<(Vec<T>, bool), AllocError> {
    match take_parsed_spare(len) {
        Some(v) => Ok((v, false)),
        None => try_zeroed(len).map(|v| (v, true)),
    }
}

/// The size of a memory page.
#[cfg(target_os = "linux")]
fn page_size() -> usize {
    // SAFETY: sysconf takes no pointers.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// Allocations of at least this many bytes are backed by huge pages where the kernel offers
/// them (numpy's threshold for its own arrays).
pub const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

/// Asks the kernel to back the 2 MiB-aligned inside of a fresh, untouched allocation with
/// transparent huge pages, as numpy does for its large arrays. Advice only: where THP is off,
/// or on other systems, nothing changes.
#[inline]
fn advise_huge_pages(ptr: *const u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    if bytes >= HUGE_PAGE_MIN_BYTES {
        // MADV_HUGEPAGE changes how the pages are backed, never their contents; failure (THP
        // off, an old kernel) leaves them as they were, so the result is ignored.
        advise_inside(ptr, bytes, 2 << 20, libc::MADV_HUGEPAGE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}

/// `madvise(advice)` over the `align`-aligned inside of the allocation `[ptr, ptr + bytes)`
/// (whole pages only: its first and last may share a page with other data); the call's
/// result, or 0 when no whole aligned span lies inside.
///
/// The caller answers for `advice` being safe on memory it owns: the range is always inside
/// the allocation.
#[cfg(target_os = "linux")]
fn advise_inside(ptr: *const u8, bytes: usize, align: usize, advice: libc::c_int) -> libc::c_int {
    let inside = aligned_inside(ptr, bytes, align);
    if inside.is_empty() {
        return 0;
    }
    // SAFETY: the range lies inside the caller's live allocation; madvise reads no memory of
    // ours, and what the advice does to the pages is the caller's to allow.
    unsafe { libc::madvise(inside.start as *mut libc::c_void, inside.len(), advice) }
}

/// The addresses of the `align`-aligned whole spans inside `[ptr, ptr + bytes)` (empty when
/// there is none): what [`advise_inside`] advises.
#[cfg(target_os = "linux")]
fn aligned_inside(ptr: *const u8, bytes: usize, align: usize) -> std::ops::Range<usize> {
    let start = (ptr as usize).next_multiple_of(align);
    let end = ((ptr as usize + bytes) & !(align - 1)).max(start);
    start..end
}

/// `len` copies of `fill`: [`try_zeroed`] when `fill` is zero bits, else [`try_filled`].
#[inline]
pub fn try_filled_zeroable<T: ZeroBits>(len: usize, fill: T) -> Result<Vec<T>, AllocError> {
    if fill.is_zero_bits() {
        try_zeroed(len)
    } else {
        try_filled(len, fill)
    }
}

/// An empty vector with room for `len` elements, or an [`AllocError`].
#[inline]
pub fn try_with_capacity<T>(len: usize) -> Result<Vec<T>, AllocError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| AllocError {
        len,
        bytes: len.checked_mul(std::mem::size_of::<T>()),
    })?;
    Ok(v)
}

/// `rows * per_row` elements, `None` on overflow.
#[inline]
pub fn batch_len(rows: usize, per_row: usize) -> Option<usize> {
    rows.checked_mul(per_row)
}

/// Bytes of a row of `values` elements of `T`, if within [`MAX_ROW_BYTES`].
#[inline]
pub fn row_bytes<T>(values: usize) -> Option<usize> {
    values
        .checked_mul(std::mem::size_of::<T>().max(1))
        .filter(|&b| b <= MAX_ROW_BYTES)
}

/// Held by a test that gives spares (see `spares_serve_batches_of_their_exact_size_and_are_bounded`).
#[cfg(test)]
pub(crate) static SPARES_TEST_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks that grow and shrink across [`SMALL_BYTES`] move between the two allocators with
    /// their bytes, and each is freed by the one that made it (a mix-up would crash here or in
    /// any later allocation).
    #[test]
    fn blocks_move_between_the_allocators_with_their_bytes() {
        for start in [1usize, SMALL_BYTES - 1, SMALL_BYTES, 3 * SMALL_BYTES] {
            let mut v: Vec<u8> = (0..start).map(|i| i as u8).collect();
            for target in [SMALL_BYTES - 8, SMALL_BYTES, 4 * SMALL_BYTES, 10, start] {
                let keep = v.len().min(target);
                v.truncate(keep);
                v.shrink_to_fit();
                v.extend((keep..target).map(|i| i as u8));
                assert!(v.iter().enumerate().all(|(i, &b)| b == i as u8));
            }
            let wide: Vec<u64> = Vec::with_capacity(SMALL_BYTES / 8 + 1);
            drop(wide);
        }
        // Zeroed blocks of both sizes read as zeros.
        for len in [100, SMALL_BYTES - 1, SMALL_BYTES, 5 * SMALL_BYTES] {
            assert!(vec![0u8; len].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn refuses_what_cannot_exist_instead_of_aborting() {
        let e = try_filled(usize::MAX / 2, 0u64).unwrap_err();
        assert_eq!(e.bytes, None);
        assert!(e.to_string().contains("overflows"), "{e}");
        // Representable but far beyond any machine's memory (isize::MAX bytes).
        let e = try_filled(isize::MAX as usize / 8, 1u8).unwrap_err();
        assert!(e.to_string().starts_with("cannot allocate"), "{e}");
        assert!(try_with_capacity::<u32>(usize::MAX).is_err());
        assert_eq!(try_filled(3, 7u16).unwrap(), vec![7, 7, 7]);
        assert_eq!(try_with_capacity::<u8>(5).unwrap().capacity(), 5);
    }

    #[test]
    fn zeroed_vectors_are_zeros_and_fail_like_the_others() {
        assert_eq!(try_zeroed::<u64>(4).unwrap(), vec![0; 4]);
        assert_eq!(try_zeroed::<f32>(0).unwrap(), Vec::<f32>::new());
        assert_eq!(try_zeroed::<bool>(3).unwrap(), vec![false; 3]);
        assert!(try_zeroed::<u64>(usize::MAX / 4).is_err());
        assert!(try_zeroed::<u8>(isize::MAX as usize / 2).is_err());
        assert_eq!(try_filled_zeroable(2, 7i32).unwrap(), vec![7, 7]);
        assert_eq!(
            try_filled_zeroable(2, -0.0f32).unwrap()[1].to_bits(),
            (-0.0f32).to_bits()
        );
        let mut v = try_filled_zeroable(3, 0i16).unwrap();
        v.push(5); // a Vec like any other: it grows and frees with the global allocator
        assert_eq!(v, vec![0, 0, 0, 5]);
    }

    #[test]
    fn dense_batches_are_zeros_on_huge_pages_where_the_kernel_has_them() {
        assert_eq!(try_zeroed_dense::<u8>(3).unwrap(), vec![0; 3]);
        assert!(try_zeroed_dense::<u64>(usize::MAX / 4).is_err());
        let mut big = try_zeroed_dense::<u32>(3 * HUGE_PAGE_MIN_BYTES / 4).unwrap();
        assert!(big.iter().all(|&v| v == 0));
        big[12345] = 7;
        assert_eq!(big.iter().map(|&v| u64::from(v)).sum::<u64>(), 7);
        // The advice is on the mapping (smaps' VmFlags "hg"), whether or not the kernel then
        // finds free huge pages; only a kernel without THP has no such flag.
        #[cfg(target_os = "linux")]
        if std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            let at = big.as_ptr() as usize + 2 * (2 << 20);
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let mut inside = false;
            let mut flagged = None;
            for line in smaps.lines() {
                if let Some((range, _)) = line.split_once(' ') {
                    if let Some((lo, hi)) = range.split_once('-') {
                        if let (Ok(lo), Ok(hi)) =
                            (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                        {
                            inside = lo <= at && at < hi;
                            continue;
                        }
                    }
                }
                if inside && line.starts_with("VmFlags:") {
                    flagged = Some(line.split_whitespace().any(|f| f == "hg"));
                }
            }
            assert_eq!(
                flagged,
                Some(true),
                "no MADV_HUGEPAGE on the batch's mapping"
            );
        }
    }

    /// The spare queue is one for the process: every check of it is in this one test, with
    /// sizes no other test allocates, and a test elsewhere that gives spares holds
    /// [`SPARES_TEST_LOCK`] (Rust runs tests on parallel threads).
    #[test]
    fn spares_serve_batches_of_their_exact_size_and_are_bounded() {
        let _alone = SPARES_TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let len = 3 * (spares::MIN_BYTES / 3 + 4097); // bytes of u8, a size only this test uses
        let give = |v: Vec<u8>| spares::give(spares::Spare::from_vec(v).unwrap());
        spares::release();
        // Too small to keep, and types other than the spare's: fresh zeros.
        give(vec![7u8; 1000]);
        assert_eq!(spares::held(), (0, 0));
        give(vec![7u8; len]);
        assert_eq!(spares::held(), (1, len));
        assert!(spares::take::<u16>(len / 2).is_none(), "another alignment");
        assert!(spares::take::<u8>(len - 1).is_none(), "another size");
        // A DenseBatch of that size takes it: its rows hold the old values until written,
        // and zeroed_row clears them.
        let mut batch = DenseBatch::<u8>::new(len, len / 3).unwrap();
        assert_eq!(spares::held(), (0, 0));
        assert!(batch.row(1).iter().all(|&v| v == 7));
        assert!(batch.zeroed_row(2).iter().all(|&v| v == 0));
        let v = batch.into_vec();
        assert_eq!(v.len(), len);
        assert!(v[..len / 3].iter().all(|&x| x == 7));
        // A fresh batch (nothing kept) is zeros, and zeroed_row leaves it so.
        let mut fresh = DenseBatch::<u8>::new(len, len / 3).unwrap();
        assert!(fresh.row(0).iter().all(|&v| v == 0));
        // bool (not ANY_BITS) never takes a spare, even one of its size and alignment.
        give(vec![7u8; len]);
        assert!(spares::take::<bool>(len).is_none());
        let mut b = DenseBatch::<bool>::new(len, len / 3).unwrap();
        assert!(!b.row(1)[3] && spares::held().0 == 1);
        drop(spares::take::<u8>(len));
        // At most MAX_SPARES are kept, the oldest dropped first.
        give(v);
        for k in 1..=spares::MAX_SPARES {
            give(vec![k as u8; len + 4096 * k]);
        }
        assert_eq!(spares::held().0, spares::MAX_SPARES);
        assert!(spares::take::<u8>(len).is_none(), "the oldest was dropped");
        let newest = spares::take::<u8>(len + 4096 * spares::MAX_SPARES).unwrap();
        assert!(newest.iter().all(|&x| x == spares::MAX_SPARES as u8));
        // Of large ones at most MAX_LARGE_SPARES, the oldest large one dropped first: a small
        // one kept before them stays.
        spares::release();
        give(vec![0u8; len]);
        let large = spares::LARGE_BYTES + 8192;
        for k in 1..=spares::MAX_LARGE_SPARES + 1 {
            give(vec![k as u8; large + k]);
        }
        assert_eq!(spares::held().0, 1 + spares::MAX_LARGE_SPARES);
        assert!(
            spares::take::<u8>(large + 1).is_none(),
            "the oldest large one was dropped"
        );
        for k in 2..=spares::MAX_LARGE_SPARES + 1 {
            drop(spares::take::<u8>(large + k).expect("a newer large one is kept"));
        }
        drop(spares::take::<u8>(len).expect("the small one is kept"));
        give(vec![1u8; len + 4096]); // what the MAX_SPARES steps left, for the checks below
        assert!(DenseBatch::<u64>::new(usize::MAX / 2, 4).is_err());
        // A Loader's end, once settled, keeps them (their pages the kernel's to reclaim on
        // Linux), and a batch of that size still takes one; its memory holds the old values
        // or, reclaimed, zeros.
        assert!(spares::ended(), "none runs");
        spares::idle();
        let kept = spares::held().0;
        assert_eq!(
            kept >= 1,
            cfg!(target_os = "linux"),
            "kept on Linux, freed elsewhere"
        );
        #[cfg(target_os = "linux")]
        {
            let mut again = DenseBatch::<u8>::new(len + 4096, len / 3).unwrap();
            assert_eq!(spares::held().0, kept - 1, "the idle spare was reused");
            assert!(again.row(0).iter().all(|&x| x == 1 || x == 0));
            again.row(0).fill(9);
            assert!(
                again.row(0).iter().all(|&x| x == 9),
                "written after MADV_FREE, it holds"
            );
            // Reclaimed by the kernel (forced here with MADV_PAGEOUT, where the kernel has
            // it), an idle spare reads as zeros, and a batch written into it holds.
            let v = again.into_vec();
            let (ptr, bytes) = (v.as_ptr(), v.len());
            spares::give(spares::Spare::from_vec(v).unwrap());
            spares::idle();
            // The kept spare, which nothing uses meanwhile: pushed out, its pages read as zeros.
            let out = advise_inside(ptr, bytes, page_size(), libc::MADV_PAGEOUT);
            let mut reclaimed = DenseBatch::<u8>::new(len + 4096, len / 3).unwrap();
            let row = reclaimed.row(1);
            if out == 0 {
                // (But for a few pages another CPU may not have marked yet: see below.)
                let left = row.iter().filter(|&&x| x != 0).count();
                assert!(
                    left <= 32 * 4096,
                    "reclaimed pages read as zeros ({left} bytes not)"
                );
            }
            row.fill(5);
            assert!(reclaimed.row(1).iter().all(|&x| x == 5));
            // A batch freed after the end (the consumer's last) waits as the others do: its
            // pages are the kernel's to reclaim too. Once a Loader starts again, a batch it
            // gives back is kept as it is, for its next batch.
            let v = reclaimed.into_vec();
            let given_back = |fill: u8| {
                let mut v = vec![fill; len + 4096];
                let (ptr, bytes) = (v.as_mut_ptr(), v.len());
                spares::give(spares::Spare::from_vec(v).unwrap());
                let out = advise_inside(ptr, bytes, page_size(), libc::MADV_PAGEOUT);
                let back = spares::take::<u8>(len + 4096).unwrap();
                // The advice covers the whole pages inside the allocation.
                let inside = aligned_inside(ptr, bytes, page_size());
                let (start, end) = (inside.start - ptr as usize, inside.end - ptr as usize);
                // A few pages may still sit in another CPU's batch of folios to mark lazily
                // freed when the kernel pages them out, and are not reclaimed then (15 at most
                // per CPU); every other page must have been.
                let left = back[start..end].iter().filter(|&&x| x != 0).count();
                (out, left <= 32 * 4096, back.iter().all(|&x| x == fill))
            };
            drop(v);
            let (out, zeros, _) = given_back(3);
            if out == 0 {
                assert!(
                    zeros,
                    "a batch given back after the end was not lazily freed"
                );
            }
            spares::in_use();
            let (_, _, kept) = given_back(4);
            assert!(kept, "a running Loader's spare lost its pages");
            // Of two Loaders, the first to end leaves the other's spares as they are.
            spares::in_use();
            assert!(!spares::ended(), "one still runs");
            spares::idle();
            let (_, _, kept) = given_back(6);
            assert!(kept, "a Loader's end took the pages of one still running");
            // A Loader that starts after the last end, before the memory settled, finds it as
            // it was: the settling then leaves it alone.
            assert!(spares::ended(), "none runs");
            spares::in_use();
            spares::idle();
            let (_, _, kept) = given_back(7);
            assert!(
                kept,
                "a settling took the pages of a Loader started after the end"
            );
            assert!(spares::ended());
            spares::idle();
        }
        spares::release();
        assert_eq!(spares::held(), (0, 0));
    }

    #[test]
    fn row_limit() {
        assert_eq!(row_bytes::<u8>(MAX_ROW_BYTES), Some(MAX_ROW_BYTES));
        assert_eq!(row_bytes::<u16>(MAX_ROW_BYTES / 2 + 1), None);
        assert_eq!(row_bytes::<u64>(usize::MAX), None);
        assert_eq!(
            row_bytes::<()>(3),
            Some(3),
            "zero-sized elements count as bytes"
        );
        assert_eq!(batch_len(usize::MAX, 2), None);
    }
}
