//! Command-line types (clap derive) and nothing else. Global flags are `global = true`, so they
//! work before or after the subcommand.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

const EXIT_CODES: &str = "\
Exit codes:
  0  done / nothing to do
  1  runtime error
  2  bad usage or rejected input (unknown work item, invalid id, bad signature, malformed body)
  3  a verdict or gate said no (gate not satisfied, tests FAIL, rolled back)
  4  busy or deferred, try later (lease held by a live owner, lost compare-and-swap)
  5  held or blocked, needs a human";

const EXAMPLES: &str = "\
Examples:
  orch init                                   write ./orch.yaml, create its state
  orch task add --repo shop --title \"Add a health endpoint\"
  orch queue                                  what runs, what waits and why
  orch why SHOP-7                             where SHOP-7 is and what it waits for
  orch logs SHOP-7 -f                         follow SHOP-7's running job to its end
  orch approve SHOP-7                         the human approval of the analysis
  orch advance SHOP-7 --to development --reason \"fixed the fixture\"
  orch pause SHOP-7 --reason \"flaky CI\" / orch resume SHOP-7
  orch retry SHOP-7                           re-queue SHOP-7's job that failed for good
  orch task show SHOP-7 --json                one task, as JSON (docs/json.md)";

/// The stage names, for `--stage`, `--to`, `--before`, `--expect-stage` (help and completion).
fn stage_values() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        crate::domain::stage::Stage::ALL.map(|s| clap::builder::PossibleValue::new(s.as_str())),
    )
}

/// The role names, for `--as`.
fn role_values() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        crate::domain::stage::Role::ALL.map(|r| clap::builder::PossibleValue::new(r.as_str())),
    )
}

#[derive(Debug, Parser)]
#[command(
    name = "orch",
    version,
    about = "Runs an AI-agent software-development pipeline: tasks, stages, gates, queue",
    after_help = EXIT_CODES,
    after_long_help = format!("{EXAMPLES}\n\n{EXIT_CODES}")
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Args)]
pub struct Global {
    /// Config file (default: $ORCH_CONFIG, ./orch.yaml, /etc/orch/orch.yaml)
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// State directory (overrides the config and $ORCH_STATE_DIR)
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Print one JSON object on stdout
    #[arg(long, global = true)]
    pub json: bool,
    /// More log output on stderr (repeat for more)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Less log output on stderr
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Who is acting, for the history (default: $SUDO_USER, else $USER, else the uid's name)
    #[arg(long, global = true, value_name = "NAME")]
    pub by: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a commented starter orch.yaml and create the state directory and database
    Init {
        /// Directory for orch.yaml (default: the current directory)
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Tasks: add, list, show
    #[command(subcommand)]
    Task(TaskCmd),
    /// Record the human approval of the analysis and advance when the files exist
    Approve {
        /// The task (`SHOP-7`)
        work_item: String,
    },
    /// Confirm a production deploy of a task in `deploy`
    ConfirmDeploy {
        /// The task (`SHOP-7`)
        work_item: String,
    },
    /// Cancel a task (STOP): stop its agent, cancel its jobs, tombstone its id
    Cancel {
        /// The task (`SHOP-7`)
        work_item: String,
        /// Why, for the history (one line, at most 1000 characters)
        #[arg(long)]
        reason: Option<String>,
    },
    /// Evaluate the exit gate of the current stage and apply the decision
    Advance(AdvanceArgs),
    /// Pause a task (or set a breakpoint with --before)
    Pause {
        /// The task (`SHOP-7`)
        work_item: String,
        /// Why, shown in `orch queue` and `orch why` (one line, at most 1000 characters)
        #[arg(long)]
        reason: String,
        /// Run unattended until the transition that would enter STAGE, then pause there (one
        /// breakpoint per task: a new one replaces the old)
        #[arg(long, value_name = "STAGE", value_parser = stage_values())]
        before: Option<String>,
    },
    /// Resume a paused task (also clears a hold)
    Resume {
        /// The task (`SHOP-7`)
        work_item: String,
    },
    /// Re-queue a job that failed for good, its attempts reset (the next tick runs it)
    Retry {
        /// A job id, or a task (`SHOP-7`): its newest job
        #[arg(value_name = "JOB-ID | WORK-ITEM")]
        target: String,
    },
    /// Hold every new analysis of a repo
    Freeze {
        /// The repo, as named in the config
        repo: String,
        /// Why, shown in `orch queue` (one line, at most 1000 characters)
        #[arg(long)]
        reason: String,
    },
    /// Lift a repo freeze
    Unfreeze {
        /// The repo, as named in the config
        repo: String,
    },
    /// Counts, running and queued jobs with why each waits, active tasks, gates, leases
    Queue {
        /// Only this repo
        #[arg(long, value_name = "REPO")]
        repo: Option<String>,
    },
    /// Where a task is and exactly what it waits for
    Why {
        /// The task (`SHOP-7`, or a tombstone `SHOP-7#cancelled-12`)
        work_item: String,
    },
    /// Print a job's log; with -f follow it until the job ends, then exit with its outcome
    Logs {
        /// A job id, or a task (`SHOP-7`): its running job, else its newest (with `--agent`: the
        /// last that ran an agent)
        #[arg(value_name = "JOB-ID | WORK-ITEM")]
        target: String,
        /// Follow the log like `tail -f` until the job ends (exit 0 done, 1 failed, 3 cancelled)
        #[arg(short, long)]
        follow: bool,
        /// Only the last N lines (with `-f`: of what is there, then everything new)
        #[arg(short = 'n', long = "tail", value_name = "N")]
        tail: Option<usize>,
        /// Only the agent's output (`job-<id>.agent.log`), one line per step
        #[arg(long)]
        agent: bool,
        /// The agent's output as the CLI printed it: one JSON event per line
        #[arg(long)]
        raw: bool,
    },
    /// Transition and merge leases
    #[command(subcommand)]
    Lease(LeaseCmd),
    /// Reports over the history
    #[command(subcommand)]
    Report(ReportCmd),
    /// One scheduler pass: reap, reclaim, reconcile, claim and launch
    Tick {
        /// Print what the pass would do, do nothing
        #[arg(long)]
        plan: bool,
    },
    /// Run the repo's test contract for a task, classify, report, and advance (design §6.1)
    RunTests {
        /// The task (`SHOP-7`), in `testing`
        work_item: String,
        /// Dry check: report under the state dir and one `checked` history row; no commit, job or stage change
        #[arg(long)]
        no_advance: bool,
    },
    /// Run the repo's staging contract for a task, classify, report, and advance (design §6.2)
    RunStaging {
        /// The task (`SHOP-7`), in `deploy-staging`
        work_item: String,
        /// Dry check: report under the state dir and one `checked` history row; no commit, job or stage change
        #[arg(long)]
        no_advance: bool,
    },
    /// Jobs (the supervisor)
    #[command(subcommand)]
    Job(JobCmd),
    /// Check config, database, git, agent command, repo remotes, services, unit files
    Doctor {
        /// Also run the configured agent once on a scratch worktree (spends a little)
        #[arg(long)]
        agent: bool,
    },
    /// Audit the invariants of the state (read-only); exit 5 when any is broken
    Fsck,
    /// Tools for testing orch itself
    #[command(subcommand)]
    Debug(DebugCmd),
    /// Pending and failed outbound effects (tracker, forge, chat)
    Outbox {
        /// Only the failed ones
        #[arg(long)]
        failed: bool,
    },
    /// Ingest one webhook delivery (body on stdin), or re-drive a stored one with --replay
    Ingest(IngestArgs),
    /// The webhook inbox, newest first (200 at most)
    Events {
        /// Only rejected deliveries
        #[arg(long)]
        rejected: bool,
    },
    /// The webhook shim: POST /webhook/plane|gitea, GET /health, /queue, /metrics
    Serve {
        /// Address to listen on; port 0 picks a free port (printed as `listening on ADDR`)
        #[arg(long, default_value = "127.0.0.1:8500", value_name = "ADDR", value_parser = listen_addr)]
        listen: String,
    },
    /// Print shell completions (bash, zsh, fish) on stdout
    Completions {
        /// The shell
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print the man page (roff) on stdout
    Man,
    /// Build a throwaway world and drive one task from created to done with real ticks
    Demo {
        /// Where to build the world (kept)
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Keep the world even without --dir
        #[arg(long)]
        keep: bool,
    },
}

/// `--listen`: an IP address and a port (`127.0.0.1:8500`, `[::1]:0`).
fn listen_addr(s: &str) -> Result<String, String> {
    s.parse::<std::net::SocketAddr>()
        .map(|_| s.to_string())
        .map_err(|_| format!("`{s}` is not an IP address and port such as 127.0.0.1:8500"))
}

/// The shells `orch completions` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IngestSource {
    Plane,
    Gitea,
}

#[derive(Debug, Args)]
pub struct IngestArgs {
    /// Who sent the delivery (optional with --replay)
    #[arg(value_enum, required_unless_present = "replay")]
    pub source: Option<IngestSource>,
    /// A request header, as `Name: value` (repeatable)
    #[arg(long = "header", value_name = "NAME: VALUE", conflicts_with = "replay")]
    pub headers: Vec<String>,
    /// Read the body from FILE instead of stdin
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    pub body: Option<PathBuf>,
    /// Re-drive the newest stored delivery with this id through routing
    #[arg(long, value_name = "DELIVERY_ID")]
    pub replay: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum JobCmd {
    /// Supervise one job attempt (started by tick; usable by hand to re-run a job)
    Run {
        /// The job id
        id: i64,
    },
}

#[derive(Debug, Subcommand)]
pub enum TaskCmd {
    /// Create a task and start it (enqueue the analyst)
    Add(TaskAddArgs),
    /// Active tasks (all with --all)
    List {
        /// Also the finished ones (done, cancelled)
        #[arg(long)]
        all: bool,
        /// Only this repo
        #[arg(long, value_name = "REPO")]
        repo: Option<String>,
        /// Only tasks in this stage
        #[arg(long, value_name = "STAGE", value_parser = stage_values())]
        stage: Option<String>,
        /// Only tasks whose stage ended with a job that failed for good (`orch retry`)
        #[arg(long)]
        failed: bool,
    },
    /// One task with its jobs, history, artifacts, and what its agents cost
    Show {
        /// The task (`SHOP-7`, or a tombstone `SHOP-7#cancelled-12`)
        work_item: String,
    },
}

#[derive(Debug, Args)]
pub struct TaskAddArgs {
    /// The repo, as named in the config
    #[arg(long, value_name = "REPO")]
    pub repo: String,
    /// One line, at most 1000 characters (the branch name is made from it)
    #[arg(long)]
    pub title: String,
    /// The tracker's id (default: <prefix>-<n>)
    #[arg(long, value_name = "WI")]
    pub work_item: Option<String>,
    /// The task's text for the agents (UTF-8, at most 1 MiB)
    #[arg(long, value_name = "FILE")]
    pub description_file: Option<PathBuf>,
    /// Put the task on the bug track (skips architecture)
    #[arg(long)]
    pub bug: bool,
    /// A label (repeatable): `auto-approve`, `auto-deploy`, `bug`, or your own
    #[arg(long = "label", value_name = "LABEL")]
    pub labels: Vec<String>,
    /// Start only after this task is done (repeatable)
    #[arg(long = "depends-on", value_name = "WI")]
    pub depends_on: Vec<String>,
}

impl Command {
    /// The human gestures (design §9.4): what only an operator may do, never a process orch
    /// started (`ORCH_SANDBOX=1`). `Some(name)` names the gesture.
    pub fn human_gesture(&self) -> Option<&'static str> {
        match self {
            Command::Approve { .. } => Some("approve"),
            Command::ConfirmDeploy { .. } => Some("confirm-deploy"),
            Command::Cancel { .. } => Some("cancel"),
            Command::Resume { .. } => Some("resume"),
            Command::Retry { .. } => Some("retry"),
            Command::Unfreeze { .. } => Some("unfreeze"),
            Command::Advance(a) if a.to.is_some() => Some("advance --to"),
            Command::Lease(LeaseCmd::Release { .. }) => Some("lease release"),
            _ => None,
        }
    }
}

#[derive(Debug, Args)]
pub struct AdvanceArgs {
    /// The task (`SHOP-7`)
    pub work_item: String,
    /// Act only if the task is still at this stage (compare-and-swap)
    #[arg(long, value_name = "STAGE", value_parser = stage_values())]
    pub expect_stage: Option<String>,
    /// Advance as this role (the supervisor finishing a job)
    #[arg(long = "as", value_name = "ROLE", value_parser = role_values())]
    pub as_role: Option<String>,
    /// Operator override: move to STAGE whatever the gate says (needs --reason)
    #[arg(long, value_name = "STAGE", requires = "reason", value_parser = stage_values())]
    pub to: Option<String>,
    /// Why the override is made; recorded in the override ledger (only with --to)
    #[arg(long, requires = "to")]
    pub reason: Option<String>,
    /// With --to: set the developer retry count back to 0
    #[arg(long, requires = "to")]
    pub reset_retries: bool,
    /// Explain the decision, change nothing
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Subcommand)]
pub enum LeaseCmd {
    /// Transition and merge leases with their owners' liveness
    List,
    /// Release a task's transition lease, or a repo's merge lease with --merge
    Release {
        /// The work item (omit with --merge)
        work_item: Option<String>,
        /// Release the merge lease of this repo instead
        #[arg(long, value_name = "REPO", conflicts_with = "work_item")]
        merge: Option<String>,
        /// Release even when the owner is alive
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ReportCmd {
    /// Every operator override with the verdict it overrode and who made it
    Overrides,
    /// What the agents cost: tokens, dollars and wall time per task, most expensive first
    Cost {
        /// Only runs started in this window: `24h`, `7d`, `30m`, or a date `2026-01-31`
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Only this repo
        #[arg(long, value_name = "REPO")]
        repo: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum DebugCmd {
    /// List every failpoint name (armed with ORCH_FAILPOINT=<name>[,<name>…])
    Failpoints,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every argument of every command, with the path of its command.
    fn args(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Arg)>) {
        for a in cmd.get_arguments() {
            out.push((path.to_string(), a.clone()));
        }
        for sub in cmd.get_subcommands() {
            args(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn every_argument_and_command_is_described() {
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        let mut all = Vec::new();
        args(&cmd, "orch", &mut all);
        let missing: Vec<String> = all
            .iter()
            .filter(|(_, a)| !["help", "version"].contains(&a.get_id().as_str()))
            .filter(|(_, a)| a.get_help().is_none() && a.get_long_help().is_none())
            .map(|(p, a)| format!("{p} {}", a.get_id()))
            .collect();
        assert!(
            missing.is_empty(),
            "arguments without a description: {missing:?}"
        );
        fn subs(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
            for s in cmd.get_subcommands() {
                let p = format!("{path} {}", s.get_name());
                if s.get_about().is_none() && s.get_name() != "help" {
                    out.push(p.clone());
                }
                subs(s, &p, out);
            }
        }
        let mut bare = Vec::new();
        subs(&cmd, "orch", &mut bare);
        assert!(bare.is_empty(), "commands without a description: {bare:?}");
    }

    #[test]
    fn stage_and_role_options_list_their_values() {
        let mut all = Vec::new();
        args(&Cli::command(), "orch", &mut all);
        for (path, id) in [
            ("orch task list", "stage"),
            ("orch advance", "to"),
            ("orch advance", "expect_stage"),
            ("orch advance", "as_role"),
            ("orch pause", "before"),
        ] {
            let (_, a) = all
                .iter()
                .find(|(p, a)| p == path && a.get_id() == id)
                .unwrap_or_else(|| panic!("{path} --{id}"));
            assert!(
                a.get_possible_values().len() >= 6,
                "{path} --{id} lists no values"
            );
        }
    }
}
