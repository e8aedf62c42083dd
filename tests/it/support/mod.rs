//! What the test modules share: the temp [`World`] and its `orch` runs, the one fake HTTP server
//! and the service fakes on it, signed webhook deliveries, `/proc` helpers, waiting with a
//! deadline, the lanes that keep the heaviest tests alone, and the real Claude Code CLI against a
//! scripted Messages API.

pub mod fake_claude;
pub mod fake_http;
pub mod fakes;
pub mod lanes;
pub mod procs;
pub mod real_cli;
pub mod sched;
pub mod webhooks;
mod world;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use world::{Run, World, branch_head, feed, git, jobs, orch_bin, transitions, wait_output};

/// Unix time in seconds, as orch stores it.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// This boot's id, as orch records it beside a pid.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .to_string()
}

/// `scripts/stub-agent`, the stand-in for the agent CLI.
pub fn stub_agent() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/stub-agent")
}

/// Every knob the stub agent understands; none may leak in from the environment of the tests.
pub const STUB_KNOBS: [&str; 15] = [
    "STUB_SLEEP",
    "STUB_SAY",
    "STUB_SESSION_ID",
    "STUB_REQUEST_CHANGES_FIRST",
    "STUB_TEST_FAIL_FIRST",
    "STUB_EXIT",
    "STUB_HANG",
    "STUB_LINGER",
    "STUB_USAGE_LIMIT",
    "STUB_NOTHING_FIRST",
    "STUB_EXTRA_FILE",
    "STUB_EXTRA_TEXT",
    "STUB_STRAY",
    "STUB_RUN_LOG",
    "STUB_STATE_DIR",
];

/// An executable `program` on `PATH`.
pub fn which(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// `PATH` with `dir` first, for a fake program (`ssh`) to shadow the real one in a child.
pub fn path_with(dir: &Path) -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let joined = std::env::join_paths(
        std::iter::once(dir.to_path_buf()).chain(std::env::split_paths(&path)),
    )
    .unwrap();
    joined.into_string().expect("PATH is UTF-8")
}

/// Poll `pred` every `every` until it holds (`true`) or `within` has passed (`false`).
pub fn poll(within: Duration, every: Duration, mut pred: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    loop {
        if pred() {
            return true;
        }
        if started.elapsed() > within {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// Poll `pred` until it holds; panic naming `what` and the caller when `within` passes first.
#[track_caller]
pub fn wait_until(what: &str, within: Duration, pred: impl FnMut() -> bool) {
    let caller = std::panic::Location::caller();
    if !poll(within, Duration::from_millis(20), pred) {
        panic!("{caller}: {what}: not reached in {within:?}");
    }
}

/// A temp dir that holds a share of the machine while it lives (see [`lanes`]).
pub struct TempDir {
    dir: tempfile::TempDir,
    _share: lanes::Share,
}

impl TempDir {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

pub fn tempdir() -> TempDir {
    let share = lanes::share();
    TempDir {
        dir: tempfile::tempdir().expect("tempdir"),
        _share: share,
    }
}

/// A [`tempdir`] under the build's own temp directory (`target/tmp`) rather than `/tmp`: for a
/// world whose paths must not vanish under a sandbox's private `/tmp`.
pub fn tempdir_outside_tmp() -> TempDir {
    let share = lanes::share();
    let parent = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(parent).expect("target tmp dir");
    TempDir {
        dir: tempfile::tempdir_in(parent).expect("tempdir"),
        _share: share,
    }
}
