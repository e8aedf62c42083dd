//! Interrupts of a foreground orch that runs a child: SIGINT, SIGTERM or SIGHUP while a
//! supervised run is under way must not orphan the child's group (Ctrl-C on `orch run-tests`
//! used to leave the suite running). `install` registers, once per process, two actions per
//! signal: outside a supervised run the default action (the process ends, as if nothing were
//! installed); during one, only a note. The supervising loop sees the note, kills the whole
//! group as for a timeout, and then the process ends of the same signal (`die_of`).
//!
//! Deliberately not here: anything about what the run was (the caller's records are fenced,
//! and the reaper treats a supervisor that died this way like any other dead one).

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::{Context, Result};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

struct State {
    /// True while no supervised run is under way: the signal's default action runs.
    idle: Arc<AtomicBool>,
    /// The signal received during a run (0: none).
    got: Arc<AtomicUsize>,
}

static STATE: OnceLock<State> = OnceLock::new();

/// Register the actions (idempotent). Called once at the start of every orch process.
pub fn install() -> Result<()> {
    if STATE.get().is_some() {
        return Ok(());
    }
    let state = State {
        idle: Arc::new(AtomicBool::new(true)),
        got: Arc::new(AtomicUsize::new(0)),
    };
    for sig in [SIGINT, SIGTERM, SIGHUP] {
        // The default action goes first: when idle it ends the process before the note.
        signal_hook::flag::register_conditional_default(sig, Arc::clone(&state.idle))
            .with_context(|| format!("installing the action of signal {sig}"))?;
        signal_hook::flag::register_usize(sig, Arc::clone(&state.got), sig as usize)
            .with_context(|| format!("installing the action of signal {sig}"))?;
    }
    let _ = STATE.set(state);
    Ok(())
}

/// Marks a supervised run under way until dropped; `None` when `install` was not called (the
/// signals then keep their default actions).
pub(super) struct Watch(());

pub(super) fn watch() -> Option<Watch> {
    let s = STATE.get()?;
    s.got.store(0, Ordering::SeqCst);
    s.idle.store(false, Ordering::SeqCst);
    Some(Watch(()))
}

impl Watch {
    /// The signal received since the run began, if any.
    pub(super) fn received(&self) -> Option<i32> {
        let got = STATE.get()?.got.load(Ordering::SeqCst);
        (got != 0).then_some(got as i32)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(s) = STATE.get() {
            s.idle.store(true, Ordering::SeqCst);
        }
    }
}

/// End the process of `sig`, as its default action would have (after the run's group is gone).
pub(super) fn die_of(sig: i32) -> ! {
    tracing::warn!("stopped by signal {sig}; the child's process group was killed first");
    let _ = signal_hook::low_level::emulate_default_handler(sig);
    // Not a terminating signal after all (cannot happen for the three installed): exit the way
    // a shell reports a signal.
    signal_hook::low_level::exit(128 + sig)
}
