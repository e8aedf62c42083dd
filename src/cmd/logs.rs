//! `orch logs <job-id | WORK-ITEM> [-f] [--agent]`: print a job's log; with `-f` follow it like
//! `tail -f` until the job ends, then exit with its outcome (0 done, 1 failed, 3 cancelled).
//! Reads the database read-only and never writes anything.

use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::ctx::Ctx;
use crate::db;
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

pub fn run(ctx: &mut Ctx, target: &str, follow: bool, agent: bool) -> Result<Code> {
    if follow && ctx.json {
        return Err(usage(
            "`--follow` streams text; drop `--json` (without `-f`, `--json` prints the log as one object)",
        ));
    }
    let job = logs::job_of(ctx, target)?;
    let path = logs::path(&ctx.config, job.id, agent);
    if !follow {
        let text = match std::fs::read(&path) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("reading `{}`", path.display())),
        };
        if ctx.json {
            output::json(&LogOut {
                schema_version: 1,
                job_id: job.id.0,
                status: job.status.to_string(),
                path: path.display().to_string(),
                exists: path.exists(),
                text,
            });
        } else if path.exists() {
            output::text(&text);
        } else {
            tracing::warn!(
                "job {} ({}) has no log yet at `{}`",
                job.id.0,
                job.status,
                path.display()
            );
        }
        return Ok(Code::Ok);
    }
    let mut offset = 0u64;
    let mut pending = Vec::new();
    loop {
        // Look at the status first, then read: the lines a job wrote before it ended are
        // printed before the follower leaves.
        let status = db::jobs::get(ctx.db.conn(), job.id)?
            .map(|j| j.status)
            .unwrap_or(job.status);
        if let Ok(mut f) = std::fs::File::open(&path) {
            f.seek(SeekFrom::Start(offset))?;
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)?;
            offset += buf.len() as u64;
            pending.extend_from_slice(&buf);
            // Whole lines only, so a masked URL is never split across two writes.
            if let Some(end) = pending.iter().rposition(|b| *b == b'\n') {
                let rest = pending.split_off(end + 1);
                output::text(&String::from_utf8_lossy(&pending));
                pending = rest;
            }
        }
        if let Some(code) = logs::ending(status) {
            if !pending.is_empty() {
                output::text(&String::from_utf8_lossy(&pending));
                output::text("\n");
            }
            eprintln!("job {} is {status}", job.id.0);
            return Ok(code);
        }
        std::thread::sleep(POLL);
    }
}
