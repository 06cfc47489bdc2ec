//! The memory Loaders keep for one another (the spare batches, `alloc::spares`, and the
//! pooled read blocks, `records::blocks`), and when the kernel may have it back.
//!
//! While a Loader runs, that memory serves its batches and reads as it is. Once none runs it
//! *settles*: its pages are the kernel's to reclaim when it needs memory (`MADV_FREE`), and a
//! later Loader reuses whatever the kernel has not taken. It settles [`GRACE`] after the last
//! Loader's end, not at the end: Loaders often come one after another (an eval loop, an epoch
//! per Loader, a benchmark's passes), and the advice at each end cost ~0.65 ms of the consumer's
//! thread and split the huge pages under the read blocks that the next Loader then read into
//! (tokens Loader passes back to back +2 % rec/s without it). A Loader that starts within the
//! grace finds the memory as it was; nothing but the timing changes (`MADV_FREE`d pages count
//! in the RSS until reclaimed, so the RSS looks the same either way).
//!
//! The settling runs on a thread of its own, `jaxrec-idle`, started by the last Loader's end and
//! ended once the memory has settled (at most about [`GRACE`] after it): no thread stays behind
//! in a process whose Loaders are done, and it holds no Python object (the interpreter's exit
//! does not wait for it). Where it cannot start, memory settles at the end.
//!
//! A `fork()` (Python's `os.fork`, `multiprocessing`'s default start method on Linux, grain's
//! worker processes) waits for the locks this memory lives under, and the child starts with
//! them free and no settling pending (the thread is not copied into it): a fork in the moment
//! the thread advised the memory, a lock held, had left the child to hang at its first batch.
//! (`fork_handlers`; `posix_spawn` and `vfork`, which `subprocess` uses, run none of this and
//! need none.)

use std::cell::RefCell;
use std::sync::{Condvar, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use crate::alloc::spares;
use crate::records::blocks;

/// How long after the last Loader's end the kept memory settles.
pub const GRACE: Duration = Duration::from_millis(500);

/// When the kept memory settles next (`None`: nothing pending), and whether the thread that
/// settles it runs.
struct Timer {
    due: Option<Instant>,
    thread: bool,
}

static TIMER: Mutex<Timer> = Mutex::new(Timer {
    due: None,
    thread: false,
});
/// Signalled when `due` is set.
static WAKE: Condvar = Condvar::new();

fn timer() -> MutexGuard<'static, Timer> {
    // Nothing can panic while the lock is held: a poisoned timer is still whole.
    TIMER.lock().unwrap_or_else(|e| e.into_inner())
}

/// A Loader starts: the kept memory serves it as it is.
pub fn loader_started() {
    fork_handlers();
    spares::in_use();
    blocks::in_use();
}

thread_local! {
    /// The locks a `fork()` in progress holds on this thread (see [`fork_handlers`]).
    static FORKING: RefCell<Option<(MutexGuard<'static, Timer>, spares::Held, blocks::Held)>> =
        const { RefCell::new(None) };
}

/// Registers, once, `fork()` handlers that hold the timer's, the spares' and the read blocks'
/// locks across the fork (in that order: no thread holds one of them while taking an earlier
/// one), so that the child finds them free whatever the `jaxrec-idle` thread (or a parse
/// thread) was doing, and that tell the child its settling thread is gone.
pub fn fork_handlers() {
    static REGISTER: Once = Once::new();
    extern "C" fn prepare() {
        let held = (timer(), spares::hold(), blocks::hold());
        FORKING.with(|f| *f.borrow_mut() = Some(held));
    }
    extern "C" fn parent() {
        FORKING.with(|f| drop(f.borrow_mut().take()));
    }
    extern "C" fn child() {
        FORKING.with(|f| {
            if let Some((mut t, kept, pool)) = f.borrow_mut().take() {
                // Only the forking thread is copied: no settling thread runs here, and the
                // parent's pending settling is the parent's.
                t.thread = false;
                t.due = None;
                drop((t, kept, pool));
            }
        });
    }
    REGISTER.call_once(|| {
        // SAFETY: the handlers are plain functions that take and release this crate's locks
        // (no Python, no panic: a poisoned lock is taken as it is) on the forking thread;
        // registering fails only for want of memory, and then a fork simply goes without
        // them, as before.
        unsafe {
            libc::pthread_atfork(Some(prepare), Some(parent), Some(child));
        }
    });
}

/// A Loader ends: once none runs, the kept memory settles [`GRACE`] later.
pub fn loader_ended() {
    let none_spares = spares::ended();
    let none_blocks = blocks::ended();
    if none_spares || none_blocks {
        settle_after(GRACE);
    }
}

/// Settles the kept memory now where no Loader runs (what [`GRACE`] after the last end does).
pub fn settle_now() {
    spares::idle();
    blocks::idle();
}

/// Settles the kept memory `delay` from now (a later call moves it), on the `jaxrec-idle`
/// thread; at once where that thread cannot start.
fn settle_after(delay: Duration) {
    let mut t = timer();
    t.due = Some(Instant::now() + delay);
    if !t.thread {
        let started = std::thread::Builder::new()
            .name("jaxrec-idle".into())
            .stack_size(64 << 10)
            .spawn(run)
            .is_ok();
        if !started {
            t.due = None;
            drop(t);
            settle_now();
            return;
        }
        t.thread = true;
    }
    WAKE.notify_one();
}

/// The `jaxrec-idle` thread: settles the memory when the due time passes, and ends once
/// nothing is due (a later end starts another).
fn run() {
    let mut t = timer();
    while let Some(due) = t.due {
        let now = Instant::now();
        if now < due {
            t = WAKE
                .wait_timeout(t, due - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            continue;
        }
        t.due = None;
        drop(t);
        // A Loader started since the end leaves the memory as it is (its counts say so).
        settle_now();
        t = timer();
    }
    t.thread = false;
}

/// Whether a settling is pending, and whether the thread runs (for tests).
#[cfg(test)]
fn pending() -> (bool, bool) {
    let t = timer();
    (t.due.is_some(), t.thread)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The timer is one per process: its tests take turns.
    static TURNS: Mutex<()> = Mutex::new(());

    fn turn() -> MutexGuard<'static, ()> {
        TURNS.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A fork while another thread holds the spares' lock (as the `jaxrec-idle` thread does
    /// while it advises them) waits for it, and the child finds the locks free and no
    /// settling pending: without the handlers the child hung on the lock.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_fork_waits_for_the_locks_and_the_child_starts_free() {
        let _turn = turn();
        fork_handlers();
        settle_after(Duration::from_secs(30)); // pending in the parent, with its thread
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let held = spares::hold();
            held_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            drop(held);
        });
        held_rx.recv().unwrap();
        // SAFETY: the child calls only lock-taking functions of this crate (which the handlers
        // left free) and `_exit`; it allocates nothing.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let free = {
                let _ = spares::held();
                drop(blocks::hold());
                pending() == (false, false)
            };
            // SAFETY: ends the child at once, running no destructor or exit handler.
            unsafe { libc::_exit(if free { 0 } else { 3 }) };
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut status = 0;
        let ended = loop {
            // SAFETY: waits for our own child, without blocking.
            let got = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if got == pid {
                break true;
            }
            if Instant::now() > deadline {
                // SAFETY: our own child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                unsafe { libc::waitpid(pid, &mut status, 0) };
                break false;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        holder.join().unwrap();
        assert!(ended, "the child hung on a lock held across the fork");
        assert!(libc::WIFEXITED(status), "the child died ({status})");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "the child found a settling pending"
        );
        assert_eq!(pending(), (true, true), "the parent's settling was lost");
        settle_after(Duration::from_millis(1));
        let deadline = Instant::now() + Duration::from_secs(10);
        while pending() != (false, false) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The last end settles the memory a grace later, on the thread, which then ends; a
    /// later end moves the settling, and one after the thread ended starts another.
    /// (Only the timer: what settling does to the memory is `alloc`'s and `blocks`' tests.)
    #[test]
    fn the_last_end_settles_after_the_grace() {
        let _turn = turn();
        let settled = || {
            let deadline = Instant::now() + Duration::from_secs(10);
            while pending() != (false, false) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            pending() == (false, false)
        };
        settle_after(Duration::from_millis(300));
        assert_eq!(pending(), (true, true), "settled at once, or no thread");
        settle_after(Duration::from_millis(900));
        std::thread::sleep(Duration::from_millis(450));
        assert_eq!(
            pending(),
            (true, true),
            "the later end did not move the settling"
        );
        assert!(settled(), "never settled, or the thread stayed");
        settle_after(Duration::from_millis(1));
        assert!(settled(), "the next end never settled");
    }
}
