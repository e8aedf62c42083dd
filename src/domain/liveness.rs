//! Liveness of a recorded process: is the process that owns a lease, a job or an agent run still
//! the one that was recorded? (design §5.2)
//!
//! A process identity is live when it was recorded on the current boot, `/proc/<pid>/stat` still
//! exists, the process is not a zombie, and its start time (clock ticks since boot) equals the
//! recorded one. The start time is what makes a recycled pid harmless.
//!
//! This module is pure: it parses the text of `/proc/<pid>/stat` and judges plain values. It does
//! not read `/proc`, look at the clock or send signals; `crate::ext::sys` gathers the facts and
//! acts on the verdict.

use std::fmt;

use crate::domain::time::Ts;

/// Who a process was when it was recorded: enough to tell it apart from any later process that
/// happens to get the same pid, on this boot or another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcIdentity {
    pub pid: i32,
    /// Field 22 of `/proc/<pid>/stat`: clock ticks after boot at which the process started.
    pub start_time: u64,
    /// `/proc/sys/kernel/random/boot_id` at the time of recording.
    pub boot_id: String,
}

/// What `/proc/<pid>/stat` says about a pid right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcObservation {
    /// Field 3: `R`, `S`, `D`, `Z`, `X`, `T`, `I`, ...
    pub state: char,
    /// Field 22, in clock ticks since boot.
    pub start_time: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    Alive,
    Dead(DeadReason),
}

impl Liveness {
    pub fn is_alive(self) -> bool {
        matches!(self, Liveness::Alive)
    }
}

/// Why a recorded process no longer counts as running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadReason {
    /// The machine rebooted since the identity was recorded; every pid from then is meaningless.
    OtherBoot,
    /// `/proc/<pid>/stat` does not exist (or cannot be parsed).
    NoSuchProcess,
    /// The process exited and waits to be reaped by its parent; it does no more work.
    Zombie,
    /// The pid now belongs to a different process.
    PidReused,
    /// A lease of a long-lived owner (`orch serve`) that was not renewed in time: the owner may
    /// live on, but its release evidently failed.
    Expired,
}

impl DeadReason {
    /// A one-line explanation naming the pid, for logs and `orch why`:
    /// `pid 4121 is gone`, `pid 4121 is a zombie`, ...
    pub fn display(self, pid: i32) -> DeadReasonDisplay {
        DeadReasonDisplay { reason: self, pid }
    }
}

/// The [`fmt::Display`] of a [`DeadReason`] for a given pid; see [`DeadReason::display`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadReasonDisplay {
    reason: DeadReason,
    pid: i32,
}

impl fmt::Display for DeadReasonDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pid = self.pid;
        match self.reason {
            DeadReason::OtherBoot => write!(f, "recorded on another boot"),
            DeadReason::NoSuchProcess => write!(f, "pid {pid} is gone"),
            DeadReason::Zombie => write!(f, "pid {pid} is a zombie"),
            DeadReason::PidReused => write!(f, "pid {pid} was reused (start time differs)"),
            DeadReason::Expired => write!(f, "the lease of pid {pid} expired unrenewed"),
        }
    }
}

/// Whether a lease still counts as held: its owner alive and, for a lease that expires, not
/// past `expires_at`.
pub fn judge_lease(owner: Liveness, expires_at: Option<Ts>, now: Ts) -> Liveness {
    match expires_at {
        Some(at) if at <= now => Liveness::Dead(DeadReason::Expired),
        _ => owner,
    }
}

/// Decides whether `recorded` is still running, given the current boot id and what
/// `/proc/<pid>/stat` says now (`None` when it does not exist).
///
/// When the start time differs the answer is `PidReused` even if the newcomer is a zombie: the
/// recorded process is gone either way, and "zombie" would describe somebody else.
pub fn judge(
    recorded: &ProcIdentity,
    current_boot_id: &str,
    observed: Option<&ProcObservation>,
) -> Liveness {
    if recorded.boot_id.trim() != current_boot_id.trim() {
        return Liveness::Dead(DeadReason::OtherBoot);
    }
    let Some(observed) = observed else {
        return Liveness::Dead(DeadReason::NoSuchProcess);
    };
    if observed.start_time != recorded.start_time {
        return Liveness::Dead(DeadReason::PidReused);
    }
    if is_zombie_state(observed.state) {
        return Liveness::Dead(DeadReason::Zombie);
    }
    Liveness::Alive
}

/// `Z` is a zombie and `X` a task being torn down; Linux 2.6.33–3.13 also printed `x` for dead.
fn is_zombie_state(state: char) -> bool {
    matches!(state, 'Z' | 'X' | 'x')
}

/// Parses the contents of `/proc/<pid>/stat`; `None` for anything that does not look like one.
///
/// Field 2 (`comm`) is the executable name in parentheses and may itself contain spaces and
/// parentheses (a process can rename itself to `a) b) c`), so the fields after it are found after
/// the *last* `)` of the line, never by splitting the whole line on spaces.
///
/// Bytes, not text: `comm` is whatever the process named itself, and a name that is not UTF-8
/// must not make a live process look dead (it would escape cancel and the reaper).
pub fn parse_stat(contents: &[u8]) -> Option<ProcObservation> {
    let open = contents.iter().position(|&b| b == b'(')?;
    let close = contents.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    std::str::from_utf8(&contents[..open])
        .ok()?
        .trim()
        .parse::<i32>()
        .ok()?;

    // Fields from 3 (state) on; field N is at index N - 3. They are all ASCII.
    let tail = std::str::from_utf8(&contents[close + 1..]).ok()?;
    let rest: Vec<&str> = tail.split_whitespace().collect();
    let state = single_char(rest.first()?)?;
    let start_time = rest.get(22 - 3)?.parse::<u64>().ok()?;
    Some(ProcObservation { state, start_time })
}

fn single_char(field: &str) -> Option<char> {
    let mut chars = field.chars();
    let c = chars.next()?;
    (chars.next().is_none() && c.is_ascii_alphabetic()).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: &str = "0d3c5c1e-7f7a-4a43-9a4b-1c2f3e4d5a6b";

    fn recorded(start_time: u64) -> ProcIdentity {
        ProcIdentity {
            pid: 4121,
            start_time,
            boot_id: BOOT.to_string(),
        }
    }

    fn obs(state: char, start_time: u64) -> Option<ProcObservation> {
        Some(ProcObservation { state, start_time })
    }

    #[test]
    fn judge_table() {
        use DeadReason::*;
        use Liveness::*;
        let cases: &[(&str, &str, Option<ProcObservation>, Liveness)] = &[
            ("running, same start", BOOT, obs('R', 900), Alive),
            ("sleeping, same start", BOOT, obs('S', 900), Alive),
            ("disk sleep, same start", BOOT, obs('D', 900), Alive),
            ("stopped, same start", BOOT, obs('T', 900), Alive),
            ("idle, same start", BOOT, obs('I', 900), Alive),
            (
                "boot id with newline",
                "0d3c5c1e-7f7a-4a43-9a4b-1c2f3e4d5a6b\n",
                obs('S', 900),
                Alive,
            ),
            ("no stat file", BOOT, None, Dead(NoSuchProcess)),
            ("zombie", BOOT, obs('Z', 900), Dead(Zombie)),
            ("dead", BOOT, obs('X', 900), Dead(Zombie)),
            ("dead, old kernels", BOOT, obs('x', 900), Dead(Zombie)),
            ("started later", BOOT, obs('S', 901), Dead(PidReused)),
            ("started earlier", BOOT, obs('S', 899), Dead(PidReused)),
            ("reused by a zombie", BOOT, obs('Z', 5000), Dead(PidReused)),
            (
                "other boot, pid looks fine",
                "another-boot",
                obs('S', 900),
                Dead(OtherBoot),
            ),
            (
                "other boot, no process",
                "another-boot",
                None,
                Dead(OtherBoot),
            ),
            ("empty current boot id", "", obs('S', 900), Dead(OtherBoot)),
        ];
        for (name, boot, observed, want) in cases {
            let got = judge(&recorded(900), boot, observed.as_ref());
            assert_eq!(got, *want, "case `{name}`");
        }
    }

    #[test]
    fn dead_reasons_name_the_pid() {
        let cases = [
            (DeadReason::NoSuchProcess, "pid 4121 is gone"),
            (DeadReason::Zombie, "pid 4121 is a zombie"),
            (
                DeadReason::PidReused,
                "pid 4121 was reused (start time differs)",
            ),
            (DeadReason::OtherBoot, "recorded on another boot"),
        ];
        for (reason, want) in cases {
            assert_eq!(reason.display(4121).to_string(), want);
        }
    }

    #[test]
    fn is_alive_only_for_alive() {
        assert!(Liveness::Alive.is_alive());
        assert!(!Liveness::Dead(DeadReason::Zombie).is_alive());
    }

    /// A realistic stat line with `comm` replaced; start time 8123456 is field 22.
    fn stat_line(comm: &str, state: char) -> String {
        format!(
            "4121 ({comm}) {state} 1 4121 4121 0 -1 4194560 1234 0 0 0 12 3 0 0 20 0 1 0 \
             8123456 2367488 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n"
        )
    }

    #[test]
    fn parse_stat_survives_hostile_comm_names() {
        let comms = [
            "sleep",
            "a) b) c",
            "a) b) c)",
            ") S 1 2 3",
            "two words",
            "((",
            "",
            "x) Z 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99",
            "tab\there",
        ];
        for comm in comms {
            for state in ['S', 'Z'] {
                let got = parse_stat(stat_line(comm, state).as_bytes());
                assert_eq!(
                    got,
                    Some(ProcObservation {
                        state,
                        start_time: 8123456
                    }),
                    "comm `{comm}`, state {state}"
                );
            }
        }
    }

    #[test]
    fn parse_stat_rejects_what_is_not_a_stat_line() {
        let cases = [
            ("empty", String::new()),
            ("no parentheses", "4121 sleep S 1 2 3".to_string()),
            ("only the comm", "4121 (sleep)".to_string()),
            ("close before open", "4121 )sleep( S".to_string()),
            (
                "truncated before field 22",
                "4121 (sleep) S 1 4121 4121 0 -1 4194560".to_string(),
            ),
            (
                "pid not a number",
                stat_line("sleep", 'S').replacen("4121", "abc", 1),
            ),
            (
                "state is two letters",
                stat_line("sleep", 'S').replacen(") S ", ") SS ", 1),
            ),
            (
                "state is a digit",
                stat_line("sleep", 'S').replacen(") S ", ") 7 ", 1),
            ),
            (
                "start time not a number",
                stat_line("sleep", 'S').replace("8123456", "-5"),
            ),
        ];
        for (name, text) in cases {
            assert_eq!(parse_stat(text.as_bytes()), None, "case `{name}`");
        }
    }

    #[test]
    fn parse_stat_reads_field_22_not_a_neighbour() {
        // Fields 21 and 23 differ from 22, so an off-by-one would show.
        let line = "7 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 21 22 23 0 0 0\n";
        assert_eq!(
            parse_stat(line.as_bytes()),
            Some(ProcObservation {
                state: 'S',
                start_time: 22
            })
        );
    }
}
