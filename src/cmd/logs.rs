//! `orch logs <job-id | WORK-ITEM> [-f] [-n N] [--agent] [--raw]`: print a job's log (its last
//! N lines with `-n`); with `-f` follow it like `tail -f` until the job ends, then exit with its
//! outcome (0 done, 1 failed, 3 cancelled). The supervisor's log comes with the agent's output of that job, rendered one line
//! per step (`domain::stream::Render`); `--agent` shows the agent's output alone, `--raw` as the
//! CLI printed it (one JSON event per line). Reads the database read-only and never writes
//! anything.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::ctx::Ctx;
use crate::db;
use crate::domain::stream::Render;
use crate::error::{Code, usage};
use crate::ops::logs;
use crate::output;

/// How often a follower looks for new lines and for the job's end.
const POLL: Duration = Duration::from_millis(300);

#[derive(Serialize)]
struct LogOut {
    schema_version: u32,
    job_id: i64,
    status: String,
    path: String,
    exists: bool,
    text: String,
}

/// One file being printed: where it is, how far it was read, and how its lines are shown.
struct Source {
    path: PathBuf,
    offset: u64,
    pending: Vec<u8>,
    /// `None`: lines as they are (the supervisor's log, or `--raw`).
    render: Option<Render>,
    /// Printed before its first line, when the output mixes two files.
    heading: Option<String>,
}

impl Source {
    fn new(path: PathBuf, render: bool, heading: Option<String>) -> Source {
        Source {
            path,
            offset: 0,
            pending: Vec::new(),
            render: render.then(Render::default),
            heading,
        }
    }

    /// The whole lines added since the last call (and the rest when `end`), as shown, with
    /// the heading before the first of them.
    fn pump(&mut self, end: bool) -> Result<String> {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Ok(String::new());
        };
        f.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)
            .with_context(|| format!("reading `{}`", self.path.display()))?;
        self.offset += buf.len() as u64;
        self.pending.extend_from_slice(&buf);
        // Whole lines only, so a masked URL or a JSON event is never split across two writes.
        let cut = if end {
            Some(self.pending.len())
        } else {
            self.pending
                .iter()
                .rposition(|b| *b == b'\n')
                .map(|i| i + 1)
        };
        let Some(cut) = cut.filter(|c| *c > 0) else {
            return Ok(String::new());
        };
        let rest = self.pending.split_off(cut);
        let chunk =
            String::from_utf8_lossy(&std::mem::replace(&mut self.pending, rest)).into_owned();
        let text = match &mut self.render {
            None => chunk,
            Some(r) => {
                let mut out = String::new();
                for line in chunk.lines() {
                    for shown in r.line(line) {
                        out.push_str(&shown);
                        out.push('\n');
                    }
                }
                out
            }
        };
        if text.is_empty() {
            return Ok(String::new());
        }
        let mut out = self
            .heading
            .take()
            .map(|h| format!("{h}\n"))
            .unwrap_or_default();
        out.push_str(&text);
        if end && !out.ends_with('\n') {
            out.push('\n');
        }
        Ok(out)
    }
}

/// The last `n` lines of `text` (all of it without `n`).
fn last_lines(text: &str, n: Option<usize>) -> &str {
    let Some(n) = n else { return text };
    let body = text.strip_suffix('\n').unwrap_or(text);
    let mut cut = body.len();
    for _ in 0..n {
        match body[..cut].rfind('\n') {
            Some(i) => cut = i,
            None => return text,
        }
    }
    &text[cut + 1..]
}

pub fn run(
    ctx: &mut Ctx,
    target: &str,
    follow: bool,
    tail: Option<usize>,
    agent: bool,
    raw: bool,
) -> Result<Code> {
    if follow && ctx.json {
        return Err(usage(
            "`--follow` streams text; drop `--json` (without `-f`, `--json` prints the log as one object)",
        ));
    }
    let job = logs::job_of(ctx, target, agent)?;
    let supervisor = logs::path(&ctx.config, job.id, false);
    let agent_log = logs::path(&ctx.config, job.id, true);
    if ctx.json {
        let path = if agent { &agent_log } else { &supervisor };
        let text = match std::fs::read(path) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("reading `{}`", path.display())),
        };
        output::json(&LogOut {
            schema_version: 1,
            job_id: job.id.0,
            status: job.status.to_string(),
            path: path.display().to_string(),
            exists: path.exists(),
            text,
        });
        return Ok(Code::Ok);
    }
    let mut sources = Vec::new();
    if !agent {
        sources.push(Source::new(supervisor.clone(), false, None));
    }
    // A job of an agent role shows its agent's output too (a runner's job has none).
    if agent || job.role.is_agent() {
        let heading =
            (!agent).then(|| format!("── agent output of job {} ({}) ──", job.id.0, job.role));
        sources.push(Source::new(agent_log.clone(), !raw, heading));
    }
    if !follow {
        let mut all = String::new();
        for s in &mut sources {
            all.push_str(&s.pump(true)?);
        }
        output::text(last_lines(&all, tail));
        if !sources.iter().any(|s| s.path.exists()) {
            let path = if agent { &agent_log } else { &supervisor };
            tracing::warn!(
                "job {} ({}, {}) has no log yet at `{}`",
                job.id.0,
                job.role,
                job.status,
                path.display()
            );
        }
        return Ok(Code::Ok);
    }
    let mut first = true;
    loop {
        // Look at the status first, then read: the lines a job wrote before it ended are
        // printed before the follower leaves.
        let status = db::jobs::get(ctx.db.conn(), job.id)?
            .map(|j| j.status)
            .unwrap_or(job.status);
        let ending = logs::ending(status);
        let mut chunk = String::new();
        for s in &mut sources {
            chunk.push_str(&s.pump(ending.is_some())?);
        }
        // `-n` cuts what was there when the follower started, like `tail -n N -f`.
        output::text(if first {
            last_lines(&chunk, tail)
        } else {
            &chunk
        });
        first = false;
        if let Some(code) = ending {
            eprintln!("job {} is {status}", job.id.0);
            return Ok(code);
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::last_lines;

    #[test]
    fn the_tail_is_the_last_lines() {
        assert_eq!(last_lines("a\nb\nc\n", Some(2)), "b\nc\n");
        assert_eq!(last_lines("a\nb\nc", Some(1)), "c");
        assert_eq!(last_lines("a\nb\n", Some(5)), "a\nb\n");
        assert_eq!(last_lines("a\nb\n", None), "a\nb\n");
        assert_eq!(last_lines("a\nb\n", Some(0)), "");
        assert_eq!(last_lines("", Some(3)), "");
    }
}
