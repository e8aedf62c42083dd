//! Who may run beside whom. All tests are one process now, run by the harness a few at a time;
//! when every module was a test binary of its own, the two tests that start hundreds of
//! processes (`concurrency`, `ingest_corpus`) were alone in theirs and ran with nothing else.
//! They still do: each takes the whole machine ([`alone`]), and every other test holds a share of
//! it for as long as it has a temp dir ([`super::tempdir`], under every world and sandbox).
//!
//! A thread holds at most one read guard, counted by the shares it hands out, so a test with
//! several worlds never takes the lock twice (a waiting writer would deadlock that).

use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::{MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

static MACHINE: RwLock<()> = RwLock::new(());

enum Held {
    Nothing,
    /// The read guard, and how many [`Share`]s of this thread use it.
    Shared {
        _guard: RwLockReadGuard<'static, ()>,
        shares: usize,
    },
    /// This thread's test runs alone.
    Alone,
}

thread_local! {
    static HELD: RefCell<Held> = const { RefCell::new(Held::Nothing) };
}

/// A share of the machine. Not `Send`: it is counted on the thread that took it.
pub struct Share {
    counted: bool,
    _thread: PhantomData<MutexGuard<'static, ()>>,
}

/// A share of the machine for this thread's test: waits while a test runs alone.
pub fn share() -> Share {
    let counted = HELD.with_borrow_mut(|held| match held {
        Held::Alone => false,
        Held::Shared { shares, .. } => {
            *shares += 1;
            true
        }
        Held::Nothing => {
            let guard = MACHINE.read().unwrap_or_else(PoisonError::into_inner);
            *held = Held::Shared {
                _guard: guard,
                shares: 1,
            };
            true
        }
    });
    Share {
        counted,
        _thread: PhantomData,
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        HELD.with_borrow_mut(|held| {
            if let Held::Shared { shares, .. } = held {
                *shares -= 1;
                if *shares == 0 {
                    *held = Held::Nothing;
                }
            }
        });
    }
}

/// The whole machine, until dropped: no test with a share runs meanwhile.
pub struct Alone {
    _guard: RwLockWriteGuard<'static, ()>,
}

/// Take the whole machine; call it before the test makes its world.
pub fn alone() -> Alone {
    HELD.with_borrow(|held| {
        assert!(
            matches!(held, Held::Nothing),
            "take the machine before making a world"
        )
    });
    let guard = MACHINE.write().unwrap_or_else(PoisonError::into_inner);
    HELD.set(Held::Alone);
    Alone { _guard: guard }
}

impl Drop for Alone {
    fn drop(&mut self) {
        HELD.set(Held::Nothing);
    }
}
