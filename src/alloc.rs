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

use std::alloc::{alloc_zeroed, Layout};
use std::fmt;

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
/// Implement it only for types for which every byte being zero is a valid value.
pub unsafe trait ZeroBits: Copy {
    /// Whether this value's bits are all zero (`-0.0` is not).
    fn is_zero_bits(&self) -> bool;
}

macro_rules! zero_bits {
    ($($t:ty => |$v:ident| $e:expr),* $(,)?) => {$(
        // SAFETY: an all-zero bit pattern is 0, 0.0 or false: a valid value of the type.
        unsafe impl ZeroBits for $t {
            #[inline(always)]
            fn is_zero_bits(&self) -> bool {
                let $v = *self;
                $e
            }
        }
    )*};
}
zero_bits!(
    i8 => |v| v == 0, i16 => |v| v == 0, i32 => |v| v == 0, i64 => |v| v == 0,
    u8 => |v| v == 0, u16 => |v| v == 0, u32 => |v| v == 0, u64 => |v| v == 0,
    bool => |v| !v,
    f32 => |v| v.to_bits() == 0, f64 => |v| v.to_bits() == 0,
    half::f16 => |v| v.to_bits() == 0, half::bf16 => |v| v.to_bits() == 0,
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
        const HUGE: usize = 2 << 20;
        let start = (ptr as usize).next_multiple_of(HUGE);
        let end = (ptr as usize + bytes) & !(HUGE - 1);
        if end > start {
            // SAFETY: [start, end) lies inside one live allocation of ours; MADV_HUGEPAGE
            // changes how its pages are backed, never their contents. Failure (THP off, an
            // old kernel) leaves the pages as they were, so the result is ignored.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
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

#[cfg(test)]
mod tests {
    use super::*;

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
