//! Exclusive advisory file locks (`flock(2)`) between `orch` processes and
//! between threads of one process.
//!
//! Responsible for: taking an exclusive lock on a path (creating the file
//! if missing), blocking or not, releasing it on drop, and recording the
//! holder's pid in the file so an operator can see who holds it.
//!
//! Deliberately not here: deleting lock files (unlinking a flock file
//! races: a waiter would end up holding a lock on an inode nobody else can
//! open, so the files stay) and shared locks. The pid is
//! for diagnostics only; the lock itself is the flock, never the pid.
//!
//! flock locks belong to the open file description: two `FileLock`s on the
//! same path exclude each other even inside one process, and the kernel
//! drops the lock when the holder dies. The fd is opened close-on-exec
//! (Rust's default), so children we spawn do not inherit and prolong it.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// A held exclusive lock; released when dropped.
#[derive(Debug)]
pub struct FileLock {
    file: Flock<File>,
    path: PathBuf,
}

impl FileLock {
    /// Block until the lock on `path` is ours.
    pub fn acquire(path: impl AsRef<Path>) -> Result<FileLock> {
        let path = path.as_ref();
        let mut file = open(path)?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(locked) => return FileLock::held(locked, path),
                // A signal interrupted the wait; keep waiting.
                Err((f, Errno::EINTR)) => file = f,
                Err((_, errno)) => {
                    return Err(errno).with_context(|| format!("locking {}", path.display()));
                }
            }
        }
    }

    /// Wait for the lock on `path` at most `limit`; `Ok(None)` if it did not come free.
    /// (`flock` has no timeout of its own, so this polls a non-blocking attempt, slowly enough
    /// to cost nothing and quickly enough that a released lock is taken within 50 ms.)
    pub fn acquire_within(path: impl AsRef<Path>, limit: Duration) -> Result<Option<FileLock>> {
        let path = path.as_ref();
        let deadline = Instant::now() + limit;
        loop {
            if let Some(l) = FileLock::try_acquire(path)? {
                return Ok(Some(l));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Take the lock on `path` if nobody holds it; `Ok(None)` if somebody does.
    pub fn try_acquire(path: impl AsRef<Path>) -> Result<Option<FileLock>> {
        let path = path.as_ref();
        let mut file = open(path)?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => return FileLock::held(locked, path).map(Some),
                Err((_, Errno::EWOULDBLOCK)) => return Ok(None),
                Err((f, Errno::EINTR)) => file = f,
                Err((_, errno)) => {
                    return Err(errno).with_context(|| format!("locking {}", path.display()));
                }
            }
        }
    }

    /// The locked path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn held(mut file: Flock<File>, path: &Path) -> Result<FileLock> {
        // Only now, holding the lock, may the previous holder's pid go.
        let pid = std::process::id();
        (|| -> std::io::Result<()> {
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            file.write_all(format!("{pid}\n").as_bytes())
        })()
        .with_context(|| format!("writing holder pid into {}", path.display()))?;
        Ok(FileLock {
            file,
            path: path.to_owned(),
        })
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Clear our pid while still holding the lock so `holder_pid` does not
        // name a process that no longer holds it; the flock itself is
        // released right after, when `file` is dropped.
        if let Err(e) = self.file.set_len(0) {
            tracing::debug!(path = %self.path.display(), error = %e, "clearing lock holder pid");
        }
    }
}

/// The pid recorded by the current holder of the lock at `path`, if any.
/// Diagnostics only: it may be stale if the holder crashed (the kernel has
/// then released the lock, and the next holder overwrites the pid).
pub fn holder_pid(path: impl AsRef<Path>) -> Option<u32> {
    let mut text = String::new();
    File::open(path.as_ref())
        .ok()?
        .take(64)
        .read_to_string(&mut text)
        .ok()?;
    text.trim().parse().ok()
}

fn open(path: &Path) -> Result<File> {
    // No truncate: the file may be held by someone else whose pid is in it.
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("opening lock file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn try_acquire_fails_while_held_on_another_fd_in_same_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("repo.lock");
        let held = FileLock::try_acquire(&path).unwrap().expect("free lock");
        assert!(FileLock::try_acquire(&path).unwrap().is_none());
        drop(held);
        assert!(FileLock::try_acquire(&path).unwrap().is_some());
    }

    #[test]
    fn creates_missing_file_and_records_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        assert_eq!(holder_pid(&path), None);
        let lock = FileLock::acquire(&path).unwrap();
        assert_eq!(lock.path(), path.as_path());
        assert_eq!(holder_pid(&path), Some(std::process::id()));
        drop(lock);
        assert!(path.exists(), "lock files are never deleted");
        assert_eq!(holder_pid(&path), None);
    }

    #[test]
    fn failed_try_does_not_clobber_holder_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        std::fs::write(&path, "12345\n").unwrap();
        let _held = FileLock::acquire(&path).unwrap();
        assert!(FileLock::try_acquire(&path).unwrap().is_none());
        assert_eq!(holder_pid(&path), Some(std::process::id()));
    }

    #[test]
    fn acquire_blocks_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let held = FileLock::acquire(&path).unwrap();
        let (tx, rx) = mpsc::channel();
        let waiter = {
            let path = path.clone();
            std::thread::spawn(move || {
                let lock = FileLock::acquire(&path).unwrap();
                tx.send(()).unwrap();
                drop(lock);
            })
        };
        // While we hold it, the waiter must not get through. The timeout only
        // bounds how long we watch for a wrong result.
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(200)),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        drop(held);
        rx.recv().expect("waiter acquires after release");
        waiter.join().unwrap();
    }

    #[test]
    fn spawned_children_do_not_inherit_the_lock() {
        // The lock fd must be close-on-exec: a long-lived child (an agent, a
        // git process) that inherited it would keep the lock after we drop it.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let held = FileLock::acquire(&path).unwrap();
        // The child blocks on stdin, so it is alive across the drop below.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read _"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(held);
        let free = FileLock::try_acquire(&path).unwrap();
        drop(child.stdin.take());
        child.wait().unwrap();
        assert!(free.is_some(), "a child process kept the lock alive");
    }
}
