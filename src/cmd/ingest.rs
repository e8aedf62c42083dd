//! `orch ingest plane|gitea [--header 'Name: value']… [--body FILE]` and
//! `orch ingest --replay <delivery-id> [plane|gitea]` (design §8).

use std::io::Read;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::cli::{IngestArgs, IngestSource};
use crate::ctx::Ctx;
use crate::domain::ids::printable;
use crate::domain::webhook::MAX_BODY;
use crate::error::{Code, usage};
use crate::ops::ingest::{self, Ingested, Source};
use crate::output;

#[derive(Serialize)]
struct IngestedOut<'a> {
    schema_version: u32,
    event_id: i64,
    source: &'static str,
    event: &'a str,
    delivery_id: &'a str,
    outcome: &'static str,
    reason: &'a str,
    work_item: Option<&'a str>,
    replay_of: Option<i64>,
    next: Option<&'a crate::ops::launch::Next>,
}

pub fn run(ctx: &mut Ctx, a: IngestArgs) -> Result<Code> {
    let source = a.source.map(|s| match s {
        IngestSource::Plane => Source::Plane,
        IngestSource::Gitea => Source::Gitea,
    });
    let done = match (&a.replay, source) {
        (Some(id), source) => ingest::replay(ctx, id, source)?,
        (None, Some(source)) => {
            let headers = a
                .headers
                .iter()
                .map(|h| parse_header(h))
                .collect::<Result<Vec<_>>>()?;
            let body = read_body(a.body.as_deref())?;
            ingest::ingest(ctx, source, &headers, &body)?
        }
        (None, None) => return Err(usage("name the source: `orch ingest plane|gitea`")),
    };
    // A delivery that acted on a task may have queued its next job: start it now.
    let next = (done.outcome == ingest::Outcome::Processed)
        .then_some(done.work_item.as_deref())
        .flatten()
        .map(|wi| crate::ops::launch::after_command(ctx, Some(wi)));
    print(ctx.json, &done, next.as_ref());
    Ok(done.code())
}

/// `Name: value`, the name an HTTP token.
fn parse_header(h: &str) -> Result<(String, String)> {
    let (name, value) = h.split_once(':').ok_or_else(|| {
        usage(format!(
            "invalid `--header` `{}`: expected `Name: value`",
            printable(h)
        ))
    })?;
    let name = name.trim();
    let token = !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !token {
        return Err(usage(format!(
            "invalid `--header` name `{}`: use letters, digits and `-`",
            printable(name)
        )));
    }
    Ok((name.to_string(), value.trim().to_string()))
}

/// The raw body, read up to one byte past the limit so an oversize one is seen as such.
fn read_body(file: Option<&std::path::Path>) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    let limit = MAX_BODY as u64 + 1;
    match file {
        Some(p) => std::fs::File::open(p)
            .map_err(|e| usage(format!("cannot read `{}`: {e}", p.display())))?
            .take(limit)
            .read_to_end(&mut body)
            .with_context(|| format!("reading `{}`", p.display()))?,
        None => std::io::stdin()
            .lock()
            .take(limit)
            .read_to_end(&mut body)
            .context("reading the body from stdin")?,
    };
    Ok(body)
}

fn print(json: bool, d: &Ingested, next: Option<&crate::ops::launch::Next>) {
    if json {
        output::json(&IngestedOut {
            schema_version: 1,
            event_id: d.event_id,
            source: d.source.as_str(),
            event: &d.event,
            delivery_id: &d.delivery_id,
            outcome: d.outcome.as_str(),
            reason: &d.reason,
            work_item: d.work_item.as_deref(),
            replay_of: d.replay_of,
            next,
        });
    } else {
        output::line(&format!(
            "{}: {} delivery `{}` (event {}): {}",
            d.outcome.as_str(),
            d.source.as_str(),
            d.delivery_id,
            d.event_id,
            d.reason
        ));
        if let Some(n) = next {
            output::line(&n.line());
        }
    }
}
