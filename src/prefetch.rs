//! Cache prefetch hints, for loops whose next reads are known before the data is needed.

/// Asks the CPU to bring the cache line holding `byte` into its L1 cache. A hint only: it
/// reads nothing into the program and cannot fault; where no instruction exists it does
/// nothing.
#[inline(always)]
pub(crate) fn prefetch(byte: &u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` of a valid address; SSE, which has it, is part of x86_64's baseline.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(byte).cast());
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `prfm` of a valid address only hints the cache (the intrinsic is not stable Rust).
    unsafe {
        std::arch::asm!(
            "prfm pldl1keep, [{0}]",
            in(reg) std::ptr::from_ref(byte),
            options(nostack, readonly, preserves_flags)
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = byte;
}

/// [`prefetch`] of every cache line of `bytes`.
#[inline(always)]
pub(crate) fn prefetch_all(bytes: &[u8]) {
    bytes.iter().step_by(64).for_each(prefetch);
}
