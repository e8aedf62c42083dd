//! Processes as `/proc` shows them: the tests find what orch started (supervisors, agents, suite
//! children) by command line, environment or working directory, check liveness the way orch's
//! leases do (pid and start time), and kill what a failed test left behind.

/// Fields of `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy)]
pub struct Stat {
    /// Field 3: `R`, `S`, `Z`, …
    pub state: char,
    /// Field 5: the process group.
    pub pgrp: i32,
    /// Field 22: the start time in clock ticks since boot.
    pub start: u64,
}

impl Stat {
    pub fn zombie(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// The stat of `pid`, or `None` when it is gone.
pub fn stat(pid: i32) -> Option<Stat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command (which may hold spaces and parentheses): field 3 is f[0].
    let f: Vec<&str> = s[s.rfind(')')? + 1..].split_whitespace().collect();
    Some(Stat {
        state: f.first()?.chars().next()?,
        pgrp: f.get(5 - 3)?.parse().ok()?,
        start: f.get(22 - 3)?.parse().ok()?,
    })
}

/// A process that has neither exited nor become a zombie.
pub fn alive(pid: i32) -> bool {
    stat(pid).is_some_and(|s| !s.zombie())
}

/// Whether the process recorded as (pid, start time) still runs (not gone, reused or a zombie).
pub fn alive_as(pid: i32, start: u64) -> bool {
    stat(pid).is_some_and(|s| s.start == start && !s.zombie())
}

pub fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Whether `KEY=value` is in the environment of `pid`.
pub fn environ_has(pid: i32, key_value: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == key_value.as_bytes()))
}

/// Every pid on the machine but this test process's.
pub fn pids() -> impl Iterator<Item = i32> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(move |pid| *pid != me)
}

/// Non-zombie processes whose command line contains `needle`, as (pid, command line).
pub fn with_cmdline(needle: &str) -> Vec<(i32, String)> {
    pids()
        .filter(|pid| alive(*pid))
        .map(|pid| (pid, cmdline(pid)))
        .filter(|(_, cmd)| cmd.contains(needle))
        .collect()
}

/// `sig` to `pid`; whether the signal was sent.
pub fn signal(pid: i32, sig: i32) -> bool {
    // SAFETY: plain kill(2); the tests only name processes they started.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// SIGKILL to `pid` (negative: to the group `-pid`); whether the signal was sent.
pub fn kill(pid: i32) -> bool {
    // SAFETY: plain kill(2); the tests only name processes (and groups) they started.
    unsafe { libc::kill(pid, libc::SIGKILL) == 0 }
}
