//! The five routes of `orch serve` and what each answers: `route` maps a method and path to a
//! [`Route`] (the first check of design §8: 404, 405 with `Allow`), and [`answer`] computes the
//! reply of a complete request from a worker's context: a webhook goes to `ops::ingest` (the
//! same code path as `orch ingest`), `/queue` to `ops::queue`, `/metrics` to [`super::metrics`].
//!
//! It does not read or write the network, and it decides nothing about a delivery: the status
//! and the reason are `ops::ingest`'s.

use anyhow::Result;

use crate::ctx::Ctx;
use crate::ops::ingest::{self, Source};
use crate::ops::queue;

use super::metrics::metrics;
use super::reply::Reply;

/// What a request asks for, once its method and path are known to be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Webhook(Source),
    Health,
    Queue,
    /// `/metrics`: the Prometheus text format.
    Metrics,
    /// `/metrics.json`: the same numbers as one JSON document.
    MetricsJson,
}

/// The first check of §8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    Found(Route),
    /// A served path asked with another method; `allow` is the `Allow` header.
    WrongMethod {
        allow: &'static str,
    },
    NotFound,
}

/// Route by method and path; the query string is ignored.
pub fn route(method: &str, target: &str) -> Routing {
    let path = target.split(['?', '#']).next().unwrap_or("");
    let (route, post) = match path {
        "/webhook/plane" => (Route::Webhook(Source::Plane), true),
        "/webhook/gitea" => (Route::Webhook(Source::Gitea), true),
        "/health" => (Route::Health, false),
        "/queue" => (Route::Queue, false),
        "/metrics" => (Route::Metrics, false),
        "/metrics.json" => (Route::MetricsJson, false),
        _ => return Routing::NotFound,
    };
    match (post, method) {
        (true, "POST") | (false, "GET" | "HEAD") => Routing::Found(route),
        (true, _) => Routing::WrongMethod { allow: "POST" },
        (false, _) => Routing::WrongMethod { allow: "GET, HEAD" },
    }
}

/// What `GET /health` answers: the process is up. The database is not consulted.
pub(super) fn health() -> Reply {
    Reply::text(200, "ok")
}

/// The answer to a complete request, computed with a worker's context (its clock set to now).
/// `Err` is an internal error (500).
pub(super) fn answer(
    ctx: &Ctx,
    route: Route,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Reply> {
    match route {
        Route::Queue => Ok(Reply::json(&queue::snapshot(ctx, None)?)),
        Route::Metrics => Ok(Reply::prometheus(super::metrics::prometheus(&metrics(
            ctx,
        )?))),
        Route::MetricsJson => Ok(Reply::json(&metrics(ctx)?)),
        Route::Webhook(source) => {
            let got = ingest::ingest(ctx, source, headers, body)?;
            // A delivery that acted on a task may have queued its next job: start it now (or,
            // as a systemd service, wake the scheduler), never failing the answer.
            if got.outcome == ingest::Outcome::Processed
                && let Some(wi) = got.work_item.as_deref()
                && let Err(e) = crate::ops::launch::after_gesture(ctx, Some(wi), true)
            {
                tracing::warn!(
                    work_item = wi,
                    "the launch after this delivery failed: {e:#}"
                );
            }
            let status = match got.http_status {
                s @ 200..=599 => s,
                other => {
                    tracing::error!(status = other, "ingest answered an impossible HTTP status");
                    500
                }
            };
            let text = if got.reason.is_empty() {
                got.outcome.as_str().to_string()
            } else {
                format!("{}: {}", got.outcome.as_str(), got.reason)
            };
            Ok(Reply::text(status, &text))
        }
        Route::Health => Ok(health()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_by_method_and_path() {
        use Routing::*;
        let cases = [
            (
                "POST",
                "/webhook/plane",
                Found(Route::Webhook(Source::Plane)),
            ),
            (
                "POST",
                "/webhook/gitea",
                Found(Route::Webhook(Source::Gitea)),
            ),
            (
                "POST",
                "/webhook/gitea?x=1",
                Found(Route::Webhook(Source::Gitea)),
            ),
            ("GET", "/health", Found(Route::Health)),
            ("HEAD", "/health", Found(Route::Health)),
            ("GET", "/queue", Found(Route::Queue)),
            ("GET", "/metrics?pretty", Found(Route::Metrics)),
            ("GET", "/metrics.json", Found(Route::MetricsJson)),
            ("GET", "/webhook/plane", WrongMethod { allow: "POST" }),
            ("PUT", "/webhook/gitea", WrongMethod { allow: "POST" }),
            ("POST", "/health", WrongMethod { allow: "GET, HEAD" }),
            ("DELETE", "/queue", WrongMethod { allow: "GET, HEAD" }),
            ("POST", "/webhook/jira", NotFound),
            ("POST", "/webhook/plane/", NotFound),
            ("POST", "http://x/webhook/plane", NotFound),
            ("GET", "/", NotFound),
            ("GET", "", NotFound),
            ("GET", "/../health", NotFound),
            ("GET", "/HEALTH", NotFound),
        ];
        for (method, target, want) in cases {
            assert_eq!(route(method, target), want, "{method} {target}");
        }
    }
}
