//! The operating system's view of processes: the boot id, `/proc/<pid>/stat`, process identities
//! to record, liveness checks, and terminating a recorded process group (design §4.3, §5.2).
//!
//! It gathers facts and hands them to the pure rules in `crate::domain::liveness`; it makes no
//! decision of its own beyond refusing to signal what it cannot verify. It spawns nothing (that is
//! `ext/proc/`), knows nothing of jobs or leases, and reads no clock except to bound its own
//! waiting. Linux only: it relies on `/proc`.
//!
//! Also the process's own protection (design §9.1): [`undumpable`] (no `/proc/<pid>/environ`,
//! `mem` or ptrace for other processes of the same user) and files and directories created
//! with an explicit mode whatever the umask ([`private_dir`], [`private_file`]).

use std::fs;
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Pid, getpgid};

use crate::domain::liveness::{self, Liveness, ProcIdentity, ProcObservation};

const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// How often [`terminate_group`] looks whether the leader is gone during the grace period.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The id of the current boot, trimmed. Read once per process: it cannot change while we run.
pub fn boot_id() -> anyhow::Result<String> {
    static BOOT_ID: OnceLock<String> = OnceLock::new();
    if let Some(id) = BOOT_ID.get() {
        return Ok(id.clone());
    }
    let raw = fs::read_to_string(BOOT_ID_PATH)
        .with_context(|| format!("reading the boot id from `{BOOT_ID_PATH}`"))?;
    let id = raw.trim();
    if id.is_empty() {
        bail!("`{BOOT_ID_PATH}` is empty; process liveness cannot be checked on this system");
    }
    Ok(BOOT_ID.get_or_init(|| id.to_string()).clone())
}

/// What `/proc/<pid>/stat` says about `pid` now; `None` when there is no such process (or no
/// readable, parseable stat file, which amounts to the same for a caller), and for `pid <= 0`,
/// which names no single process.
pub fn observe(pid: i32) -> Option<ProcObservation> {
    if pid <= 0 {
        return None;
    }
    let contents = fs::read(format!("/proc/{pid}/stat")).ok()?;
    liveness::parse_stat(&contents)
}

/// The identity of a running process, to record as the owner of a job, lease or agent run.
pub fn identity_of(pid: i32) -> anyhow::Result<ProcIdentity> {
    if pid <= 0 {
        bail!("cannot record the identity of pid `{pid}`: a process id is a positive number");
    }
    let boot_id = boot_id()?;
    let observed = observe(pid).with_context(|| {
        format!("cannot record the identity of pid `{pid}`: `/proc/{pid}/stat` is missing or unreadable, so the process is gone")
    })?;
    Ok(ProcIdentity {
        pid,
        start_time: observed.start_time,
        boot_id,
    })
}

/// The identity of the current process.
pub fn self_identity() -> anyhow::Result<ProcIdentity> {
    let pid = i32::try_from(std::process::id()).context("the current pid does not fit an i32")?;
    identity_of(pid)
}

/// Whether the recorded process is still the one running under its pid.
///
/// If the boot id cannot be read now (it always can on Linux with `/proc`), the boot comparison is
/// skipped rather than failed: calling a live owner dead would let a second actor take over its
/// work, while the pid and start-time checks still catch every ordinary death.
pub fn is_live(identity: &ProcIdentity) -> Liveness {
    let current_boot = boot_id().unwrap_or_else(|_| identity.boot_id.clone());
    liveness::judge(identity, &current_boot, observe(identity.pid).as_ref())
}

/// Terminates the process group led by `leader`: SIGTERM to the group, up to `grace` for the
/// leader to go (checked every 50 ms), then SIGKILL to the group for whatever is left, such as
/// background children that ignored SIGTERM. Returns whether anything was signalled.
///
/// The group is signalled only while its leader is verifiably the recorded process: live, with
/// the recorded boot id and start time, and the leader of its own group. A dead, zombie or
/// recycled leader yields `Ok(false)` and no signal, because a group id is only as trustworthy as
/// the process it was recorded from. Refuses with an error (and signals nothing) for pid <= 1, a
/// process that does not lead its group, and the caller's own process group.
///
/// The check and the first signal are two system calls, so a leader that dies and has its pid
/// recycled into a new group leader in between could be hit; with pid start times that window is
/// microseconds and it is the best `kill(2)` allows.
pub fn terminate_group(leader: &ProcIdentity, grace: Duration) -> anyhow::Result<bool> {
    let pid = leader.pid;
    if pid <= 1 {
        bail!(
            "refusing to signal the process group of pid `{pid}`: it is not a process orch started"
        );
    }
    if !is_live(leader).is_alive() {
        return Ok(false);
    }
    let group = Pid::from_raw(pid);
    match getpgid(Some(group)) {
        Ok(pgid) if pgid == group => {}
        Ok(pgid) => bail!(
            "refusing to signal the process group of pid `{pid}`: it is not a group leader (its group is `{pgid}`)"
        ),
        // It exited between the liveness check and now: nothing left to verify, nothing to signal.
        Err(Errno::ESRCH) => return Ok(false),
        Err(e) => {
            return Err(e).with_context(|| format!("reading the process group of pid `{pid}`"));
        }
    }
    let own_group = getpgid(None).context("reading the current process group")?;
    if own_group == group {
        bail!(
            "refusing to signal the process group of pid `{pid}`: it is orch's own process group"
        );
    }

    match killpg(group, Signal::SIGTERM) {
        Ok(()) => {}
        Err(Errno::ESRCH) => return Ok(false),
        Err(e) => {
            return Err(e).with_context(|| format!("sending SIGTERM to process group `{pid}`"));
        }
    }

    let deadline = Instant::now() + grace;
    while is_live(leader).is_alive() && Instant::now() < deadline {
        thread::sleep(POLL_INTERVAL.min(deadline.saturating_duration_since(Instant::now())));
    }

    // The group id cannot be handed to a new group while any member of the old one is left, so
    // this reaches only the stragglers, or nobody (ESRCH) once all of them are gone.
    match killpg(group, Signal::SIGKILL) {
        Ok(()) | Err(Errno::ESRCH) => Ok(true),
        Err(e) => Err(e).with_context(|| format!("sending SIGKILL to process group `{pid}`")),
    }
}

/// Make this process undumpable (`PR_SET_DUMPABLE` 0): other processes of the same user, an
/// agent among them, can no longer read its `/proc/<pid>/environ`, `cmdline`-adjacent memory or
/// attach to it. Children get the default back at `exec`.
pub fn undumpable() -> anyhow::Result<()> {
    nix::sys::prctl::set_dumpable(false).context("prctl(PR_SET_DUMPABLE, 0)")
}

/// Create `dir` (and its parents) when missing and give the directory itself `mode` (parents
/// keep what `create_dir_all` gave them). An existing directory keeps its mode: the operator may
/// have tightened it.
pub fn private_dir(dir: &std::path::Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).with_context(|| format!("creating directory `{}`", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of `{}`", dir.display()))
}

/// The name of the user this process runs as, from the user database.
pub fn uid_name() -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
}

/// Create the empty file `path` with `mode` when it is missing (an existing file is left
/// alone), so what opens it next (SQLite) finds it with that mode.
pub fn private_file(path: &std::path::Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
    {
        Ok(_) => fs::set_permissions(path, fs::Permissions::from_mode(mode))
            .with_context(|| format!("setting the mode of `{}`", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating `{}`", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::liveness::DeadReason;
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command, Stdio};

    const DEADLINE: Duration = Duration::from_secs(10);

    /// Polls `cond` until it holds or `DEADLINE` passes; returns whether it held.
    fn eventually(mut cond: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if cond() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// A child that is killed and reaped when the test ends, however it ends.
    struct Reaped(Child);

    impl Reaped {
        fn pid(&self) -> i32 {
            i32::try_from(self.0.id()).unwrap()
        }
    }

    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn spawn_group_leader(program: &str, args: &[&str]) -> Reaped {
        let child = Command::new(program)
            .args(args)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning `{program}`: {e}"));
        Reaped(child)
    }

    /// Spawns `sh -c SCRIPT` as a group leader; SCRIPT prints the pid of a background `sleep`
    /// first. Returns the leader and the grandchild's identity.
    fn spawn_family(script: &str) -> (Reaped, ProcIdentity) {
        let mut leader = spawn_group_leader("sh", &["-c", script]);
        let mut line = String::new();
        BufReader::new(leader.0.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let grandchild = identity_of(grandchild).unwrap();
        (leader, grandchild)
    }

    #[test]
    fn boot_id_is_a_trimmed_uuid() {
        let id = boot_id().unwrap();
        assert_eq!(id.len(), 36, "boot id `{id}`");
        assert_eq!(id, id.trim());
        assert_eq!(boot_id().unwrap(), id);
    }

    #[test]
    fn the_current_process_is_alive() {
        let me = self_identity().unwrap();
        assert_eq!(me.pid, i32::try_from(std::process::id()).unwrap());
        assert!(me.start_time > 0);
        assert_eq!(is_live(&me), Liveness::Alive);
    }

    #[test]
    fn no_single_process_below_pid_1() {
        for pid in [0, -1, -4121] {
            assert_eq!(observe(pid), None);
            let err = identity_of(pid).unwrap_err();
            assert!(
                err.to_string()
                    .contains("a process id is a positive number"),
                "{err:#}"
            );
        }
    }

    #[test]
    fn identity_of_a_missing_pid_says_it_is_gone() {
        // Above any pid_max Linux allows (2^22), so it never names a process.
        let err = identity_of(i32::MAX).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot record the identity of pid `2147483647`: `/proc/2147483647/stat` is missing or unreadable, so the process is gone"
        );
    }

    /// `/proc/<pid>/stat` was read as UTF-8 text: a process whose name is not UTF-8 was judged
    /// dead, so it escaped cancel and the reaper.
    #[test]
    fn a_process_with_a_non_utf8_name_is_alive() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let name = std::ffi::OsStr::from_bytes(b"sl\xff\xfeep");
        let exe = dir.path().join(name);
        std::os::unix::fs::symlink("/bin/sleep", &exe).unwrap();
        let mut child = Command::new(&exe).arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let raw = std::fs::read(format!("/proc/{pid}/stat")).unwrap();
        assert!(
            std::str::from_utf8(&raw).is_err(),
            "the name should not be UTF-8"
        );
        let me = identity_of(pid).unwrap();
        assert_eq!(is_live(&me), Liveness::Alive);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!is_live(&me).is_alive());
    }

    #[test]
    fn a_child_is_alive_until_killed_and_reaped() {
        let mut child = spawn_group_leader("sleep", &["30"]);
        let id = identity_of(child.pid()).unwrap();
        assert_eq!(is_live(&id), Liveness::Alive);

        let reused = ProcIdentity {
            start_time: id.start_time + 1,
            ..id.clone()
        };
        assert_eq!(is_live(&reused), Liveness::Dead(DeadReason::PidReused));

        let rebooted = ProcIdentity {
            boot_id: "00000000-0000-0000-0000-000000000000".to_string(),
            ..id.clone()
        };
        assert_eq!(is_live(&rebooted), Liveness::Dead(DeadReason::OtherBoot));

        child.0.kill().unwrap();
        child.0.wait().unwrap();
        // Once reaped the pid is free; in the unlikely event it was handed out again at once,
        // the start time tells the newcomer apart.
        let after = is_live(&id);
        assert!(
            matches!(
                after,
                Liveness::Dead(DeadReason::NoSuchProcess | DeadReason::PidReused)
            ),
            "{after:?}"
        );
    }

    #[test]
    fn a_killed_child_not_yet_waited_for_is_a_zombie() {
        let mut child = spawn_group_leader("sleep", &["30"]);
        let id = identity_of(child.pid()).unwrap();
        child.0.kill().unwrap();
        assert!(
            eventually(|| observe(id.pid).is_some_and(|o| o.state == 'Z')),
            "pid {} never became a zombie",
            id.pid
        );
        assert_eq!(is_live(&id), Liveness::Dead(DeadReason::Zombie));
        // A zombie leader is not verifiable any more, so its group is left alone.
        assert!(!terminate_group(&id, Duration::from_secs(1)).unwrap());
        child.0.wait().unwrap();
    }

    #[test]
    fn terminate_group_kills_the_leader_and_a_grandchild() {
        let (mut leader, grandchild) = spawn_family("sleep 30 & echo $!; sleep 30");
        let id = identity_of(leader.pid()).unwrap();
        assert_eq!(is_live(&grandchild), Liveness::Alive);

        assert!(terminate_group(&id, Duration::from_secs(5)).unwrap());

        leader.0.wait().unwrap();
        assert!(
            eventually(|| !is_live(&grandchild).is_alive()),
            "grandchild pid {} survived its group being terminated",
            grandchild.pid
        );
    }

    #[test]
    fn terminate_group_escalates_to_sigkill_after_the_grace_period() {
        // An ignored SIGTERM is inherited by the background sleep as well.
        let (mut leader, grandchild) = spawn_family("trap '' TERM; sleep 30 & echo $!; sleep 30");
        let id = identity_of(leader.pid()).unwrap();
        let grace = Duration::from_millis(300);

        let started = Instant::now();
        assert!(terminate_group(&id, grace).unwrap());
        assert!(
            started.elapsed() >= grace,
            "SIGKILL came before the grace period ended"
        );

        leader.0.wait().unwrap();
        assert!(
            eventually(|| !is_live(&grandchild).is_alive()),
            "grandchild pid {} ignored SIGTERM and survived SIGKILL",
            grandchild.pid
        );
    }

    #[test]
    fn terminate_group_leaves_a_recycled_pid_alone() {
        let mut child = spawn_group_leader("sleep", &["30"]);
        let id = identity_of(child.pid()).unwrap();
        let stale = ProcIdentity {
            start_time: id.start_time + 1,
            ..id.clone()
        };
        assert!(!terminate_group(&stale, Duration::from_secs(1)).unwrap());
        assert_eq!(
            is_live(&id),
            Liveness::Alive,
            "the innocent process was hit"
        );
        child.0.kill().unwrap();
        child.0.wait().unwrap();
    }

    #[test]
    fn terminate_group_refuses_pid_1_and_below() {
        for pid in [1, 0, -1] {
            let identity = ProcIdentity {
                pid,
                start_time: 1,
                boot_id: boot_id().unwrap(),
            };
            let err = terminate_group(&identity, Duration::ZERO).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "refusing to signal the process group of pid `{pid}`: it is not a process orch started"
                )
            );
        }
    }

    #[test]
    fn terminate_group_refuses_a_process_that_does_not_lead_its_group() {
        // Without process_group(0) the child stays in the test runner's group: signalling "its"
        // group would hit us.
        let child = Command::new("sleep")
            .arg("30")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let mut child = Reaped(child);
        let id = identity_of(child.pid()).unwrap();
        let err = terminate_group(&id, Duration::ZERO).unwrap_err();
        assert!(
            err.to_string().contains("it is not a group leader"),
            "{err:#}"
        );
        assert_eq!(is_live(&id), Liveness::Alive);
        child.0.kill().unwrap();
        child.0.wait().unwrap();
    }

    #[test]
    fn private_modes_ignore_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o000));
        let d = t.path().join("a/state");
        private_dir(&d, 0o750).unwrap();
        let f = d.join("orch.db");
        private_file(&f, 0o640).unwrap();
        nix::sys::stat::umask(old);
        let mode = |p: &std::path::Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&d), 0o750);
        assert_eq!(mode(&f), 0o640);
        // An existing file or directory is left as the operator made it.
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
        private_dir(&d, 0o750).unwrap();
        private_file(&f, 0o600).unwrap();
        assert_eq!(mode(&d), 0o700);
        assert_eq!(mode(&f), 0o640);
    }
}
