//! One delivery from its raw bytes to its inbox row: the delivery id, the size and signature
//! check, dedup against accepted deliveries (same id, or same body within 7 days), routing to `plane` or `gitea`, and the stored row
//! (headers redacted, a rejected body cut); `replay` re-drives a stored one; `events` lists them.

use anyhow::{Context, Result, anyhow};
use serde_json::Value;
use tracing::{info, warn};

use crate::ctx::Ctx;
use crate::db::{self, events::NewEvent};
use crate::domain::ids::printable;
use crate::domain::webhook::{
    self, MAX_BODY, MAX_REJECTED_BODY, Outcome, Rejection, Secret, Source, Verified,
};
use crate::error::{Code, code_of, usage};
use crate::ext::failpoint;

use super::routed::Routed;

/// What became of one delivery.
#[derive(Debug, Clone)]
pub struct Ingested {
    /// The inbox row written for it.
    pub event_id: i64,
    pub source: Source,
    pub event: String,
    pub delivery_id: String,
    pub outcome: Outcome,
    pub reason: String,
    pub work_item: Option<String>,
    /// What `orch serve` answers: 200 accepted (processed, duplicate, ignored), 401 bad or
    /// missing signature, 400 malformed body, 413 too large, 500 an internal error while
    /// acting (stored as `rejected`, so a redelivery or a replay acts again).
    pub http_status: u16,
    /// The inbox row a replay re-drove.
    pub replay_of: Option<i64>,
}

impl Ingested {
    /// The exit code of `orch ingest`: 0 accepted, 2 rejected, 1 an internal error.
    pub fn code(&self) -> Code {
        match (self.outcome, self.http_status) {
            (_, 500..) => Code::Runtime,
            (Outcome::Rejected, _) => Code::Usage,
            (Outcome::Processed | Outcome::Duplicate | Outcome::Ignored, _) => Code::Ok,
        }
    }
}

/// One delivery as it will be stored.
struct Delivery<'a> {
    source: Source,
    delivery_id: String,
    event: Option<String>,
    headers_json: String,
    body: &'a [u8],
    body_size: usize,
    /// The digest of the body as received (`webhook::body_digest`).
    body_sha256: String,
    replay_of: Option<i64>,
}

/// Verify, deduplicate, route and store one delivery. `headers` are as received (names in any
/// case); `body` is the raw bytes (a caller that stopped reading past [`MAX_BODY`] passes what
/// it read, which is enough to reject it as too large).
pub fn ingest(
    ctx: &Ctx,
    source: Source,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Ingested> {
    let d = Delivery {
        source,
        delivery_id: webhook::delivery_id(source, headers, body),
        event: webhook::event_header(source, headers),
        headers_json: headers_json(ctx, headers),
        body,
        body_size: body.len(),
        body_sha256: webhook::body_digest(source, body),
        replay_of: None,
    };
    let (secret, allow_unsigned) = secret_of(ctx, source);
    let routed = match webhook::check_delivery(source, &secret, allow_unsigned, headers, body) {
        Err(r) => Routed::rejected(r),
        Ok(v) => route_verified(ctx, &d, v, true),
    };
    failpoint::hit("ingest.after-route");
    store(ctx, d, routed)
}

/// `orch ingest --replay <delivery-id>`: re-drive the newest stored delivery with this id (of
/// `source` when given) through routing, and store the result as a new row. An accepted or
/// duplicate one was verified when it came in and is routed again without deduplication (that
/// is the point of a replay); a rejected one is verified again with the current secret first.
pub fn replay(ctx: &Ctx, delivery_id: &str, source: Option<Source>) -> Result<Ingested> {
    if !webhook::valid_delivery_id(delivery_id) {
        return Err(usage(format!(
            "invalid delivery id `{}`: expected at most 128 characters of `A-Za-z0-9._:-`",
            printable(delivery_id)
        )));
    }
    let row = db::events::newest(ctx.db.conn(), delivery_id, source.map(Source::as_str))?
        .ok_or_else(|| {
            usage(format!(
                "no stored delivery `{delivery_id}`{}; `orch events` lists the inbox",
                source
                    .map(|s| format!(" from `{}`", s.as_str()))
                    .unwrap_or_default()
            ))
        })?;
    let source = Source::parse(&row.source)
        .ok_or_else(|| anyhow!("event {} has an unknown source `{}`", row.id, row.source))?;
    let outcome = Outcome::parse(&row.outcome)
        .ok_or_else(|| anyhow!("event {} has an unknown outcome `{}`", row.id, row.outcome))?;
    let headers = headers_from_json(&row.headers)
        .with_context(|| format!("reading the stored headers of event {}", row.id))?;
    let d = Delivery {
        source,
        delivery_id: row.delivery_id.clone(),
        event: (!row.event.is_empty()).then(|| row.event.clone()),
        headers_json: row.headers.clone(),
        body: &row.body,
        body_size: usize::try_from(row.body_size).unwrap_or(usize::MAX),
        // A rejected body may be stored cut: its digest is the one taken when it came in.
        body_sha256: row
            .body_sha256
            .clone()
            .unwrap_or_else(|| webhook::body_digest(source, &row.body)),
        replay_of: Some(row.id),
    };
    let routed = match outcome {
        Outcome::Rejected if d.body_size > d.body.len() => Routed::rejected(Rejection {
            reason: format!(
                "the stored body was cut at {} of {} bytes, so it cannot be verified again",
                d.body.len(),
                d.body_size
            ),
            http_status: if d.body_size > MAX_BODY { 413 } else { 400 },
        }),
        Outcome::Rejected => {
            let (secret, allow_unsigned) = secret_of(ctx, source);
            match webhook::check_delivery(source, &secret, allow_unsigned, &headers, d.body) {
                Err(r) => Routed::rejected(r),
                Ok(v) => route_verified(ctx, &d, v, true),
            }
        }
        Outcome::Processed | Outcome::Ignored | Outcome::Duplicate => {
            route_verified(ctx, &d, Verified::Signed, false)
        }
    };
    let routed = Routed {
        reason: format!("replay of event {}: {}", row.id, routed.reason),
        ..routed
    };
    store(ctx, d, routed)
}

/// Parse and route a delivery whose signature passed. Errors inside a use-case become a
/// `rejected` row with status 500 (usage errors, which are races with another actor or
/// inputs the use-case refused, become `ignored`).
fn route_verified(ctx: &Ctx, d: &Delivery<'_>, verified: Verified, dedup: bool) -> Routed {
    let routed = match route(ctx, d, dedup) {
        Ok(r) => r,
        Err(e) if code_of(&e) == Code::Usage => Routed::ignored(format!("{e:#}"), None),
        Err(e) => {
            warn!(
                source = d.source.as_str(),
                delivery = %d.delivery_id,
                "acting on a delivery failed: {e:#}"
            );
            Routed {
                http_status: 500,
                ..Routed::new(Outcome::Rejected, format!("internal error: {e:#}"), None)
            }
        }
    };
    match (verified, routed.outcome) {
        (Verified::Unsigned, Outcome::Processed | Outcome::Ignored) => Routed {
            reason: format!(
                "{}; accepted unsigned (`{}.allow_unsigned: true`)",
                routed.reason,
                d.source.config_block()
            ),
            ..routed
        },
        _ => routed,
    }
}

fn route(ctx: &Ctx, d: &Delivery<'_>, dedup: bool) -> Result<Routed> {
    if dedup
        && let Some(first) = db::events::accepted(ctx.db.conn(), d.source.as_str(), &d.delivery_id)?
    {
        return Ok(Routed::new(
            Outcome::Duplicate,
            format!(
                "delivery `{}` was already accepted (event {first})",
                d.delivery_id
            ),
            None,
        ));
    }
    // The same bytes under another delivery id (or none) are a re-sent copy, not a new event:
    // every real event carries something of its own (a timestamp, an id).
    if dedup
        && let Some((first, first_id)) = db::events::accepted_body(
            ctx.db.conn(),
            d.source.as_str(),
            &d.body_sha256,
            ctx.now - webhook::BODY_DEDUP_WINDOW_S,
        )?
    {
        return Ok(Routed::new(
            Outcome::Duplicate,
            format!(
                "the same body was accepted as event {first} (delivery `{first_id}`) within \
                 the last 7 days"
            ),
            None,
        ));
    }
    let value = match webhook::parse_json(d.body) {
        Ok(v) => v,
        Err(reason) => {
            return Ok(Routed::rejected(Rejection {
                reason,
                http_status: 400,
            }));
        }
    };
    match d.source {
        Source::Plane => super::plane::route_plane(ctx, &value, d.event.as_deref()),
        Source::Gitea => super::gitea::route_gitea(ctx, &value, d.event.as_deref()),
    }
}

// ---- secrets, headers, storage ----

/// The source's webhook secret and `allow_unsigned`, from its config block: read now from its
/// file, a systemd credential or its variable (design §9.1).
fn secret_of(ctx: &Ctx, source: Source) -> (Secret, bool) {
    let block = match source {
        Source::Plane => ctx.config.tracker.as_ref(),
        Source::Gitea => ctx.config.forge.as_ref(),
    };
    let Some(b) = block else {
        return (Secret::NotConfigured, false);
    };
    if !b.has_webhook_secret() {
        return (Secret::NotConfigured, b.allow_unsigned);
    }
    let unset = || Secret::Unset {
        var: b
            .webhook_secret_file
            .as_ref()
            .map(|f| f.display().to_string())
            .or_else(|| b.webhook_secret_env.clone())
            .unwrap_or_default(),
    };
    let secret = match crate::ext::secrets::read(b.webhook_secret_where()) {
        Ok(Some(v)) => Secret::Set(v.into_bytes()),
        Ok(None) => unset(),
        Err(e) => {
            warn!("{e:#}");
            unset()
        }
    };
    (secret, b.allow_unsigned)
}

/// The values of every configured token and webhook secret, so none is stored in the inbox.
fn configured_secrets(ctx: &Ctx) -> Vec<String> {
    [&ctx.config.tracker, &ctx.config.forge, &ctx.config.chat]
        .into_iter()
        .flatten()
        .flat_map(|s| [s.token_where(), s.webhook_secret_where()])
        .filter_map(|w| crate::ext::secrets::read(w).ok().flatten())
        .collect()
}

fn headers_json(ctx: &Ctx, headers: &[(String, String)]) -> String {
    let mut map = serde_json::Map::new();
    for (name, value) in webhook::redact_headers(headers, &configured_secrets(ctx)) {
        match map.get_mut(&name) {
            Some(Value::String(v)) => {
                v.push_str(", ");
                v.push_str(&value);
            }
            _ => {
                map.insert(name, Value::String(value));
            }
        }
    }
    Value::Object(map).to_string()
}

fn headers_from_json(s: &str) -> Result<Vec<(String, String)>> {
    let v: Value = serde_json::from_str(s)?;
    let map = v
        .as_object()
        .ok_or_else(|| anyhow!("the stored headers are not a JSON object"))?;
    Ok(map
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
        .collect())
}

fn store(ctx: &Ctx, d: Delivery<'_>, r: Routed) -> Result<Ingested> {
    let body = match r.outcome {
        Outcome::Rejected => &d.body[..d.body.len().min(MAX_REJECTED_BODY)],
        Outcome::Processed | Outcome::Duplicate | Outcome::Ignored => d.body,
    };
    let event = d.event.or(r.event).unwrap_or_default();
    let reason = if r.reason.is_empty() {
        r.outcome.as_str().to_string()
    } else {
        r.reason
    };
    let event_id = ctx.db.write(|tx| {
        db::events::insert(
            tx,
            &NewEvent {
                source: d.source.as_str(),
                event: &event,
                delivery_id: &d.delivery_id,
                headers: &d.headers_json,
                body,
                body_size: d.body_size,
                body_sha256: &d.body_sha256,
                outcome: r.outcome.as_str(),
                reason: &reason,
                work_item: r.work_item.as_deref(),
                replay_of: d.replay_of,
            },
            ctx.now,
        )
    })?;
    info!(
        source = d.source.as_str(),
        delivery = %d.delivery_id,
        event_id,
        outcome = r.outcome.as_str(),
        "{reason}"
    );
    Ok(Ingested {
        event_id,
        source: d.source,
        event,
        delivery_id: d.delivery_id,
        outcome: r.outcome,
        reason,
        work_item: r.work_item,
        http_status: r.http_status,
        replay_of: d.replay_of,
    })
}

/// `orch events`: the newest 200 deliveries (only rejected ones with `rejected_only`).
pub fn events(ctx: &Ctx, rejected_only: bool) -> Result<Vec<db::events::EventSummary>> {
    db::events::list(ctx.db.conn(), rejected_only, 200)
}
