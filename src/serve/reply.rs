//! The answer of `orch serve` to one request, as routes and workers build it: a status, a short
//! text or a JSON document, and the few headers the shim sets itself (`Allow` on a 405,
//! `Retry-After` on a 503, `Connection`). [`Reply::into_response`] turns it into the response
//! hyper writes; hyper adds `Date` and `Content-Length` and does all the encoding.
//!
//! It decides nothing about a request and touches neither the network nor the database.

use http_body_util::Full;
use hyper::Response;
use hyper::StatusCode;
use hyper::body::Bytes;
use hyper::header::{ALLOW, CONNECTION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use serde::Serialize;

/// An answer, before it is written.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    pub json: bool,
    /// Another `Content-Type` than `json` says (the Prometheus exposition format).
    pub content_type: Option<&'static str>,
    /// The `Allow` header of a 405.
    pub allow: Option<&'static str>,
    /// Send `Retry-After: 1` (a 503 for a full queue).
    pub retry_after: bool,
    /// The exchange left the connection unusable (a body not read to its end, broken framing).
    pub close: bool,
}

impl Reply {
    /// A short plain-text answer (a newline is added).
    pub fn text(status: u16, text: &str) -> Reply {
        let mut body = text.as_bytes().to_vec();
        body.push(b'\n');
        Reply {
            status,
            body,
            json: false,
            content_type: None,
            allow: None,
            retry_after: false,
            close: false,
        }
    }

    /// A 200 with `value` as pretty JSON.
    pub fn json<T: Serialize>(value: &T) -> Reply {
        match serde_json::to_vec_pretty(value) {
            Ok(mut body) => {
                body.push(b'\n');
                Reply {
                    status: 200,
                    body,
                    json: true,
                    content_type: None,
                    allow: None,
                    retry_after: false,
                    close: false,
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot encode a JSON answer");
                internal_error()
            }
        }
    }

    /// A 200 in the Prometheus text exposition format (version 0.0.4).
    pub fn prometheus(text: String) -> Reply {
        Reply {
            status: 200,
            body: text.into_bytes(),
            json: false,
            content_type: Some("text/plain; version=0.0.4; charset=utf-8"),
            allow: None,
            retry_after: false,
            close: false,
        }
    }

    /// Mark the connection for closing after this answer when `close`.
    pub fn closing(mut self, close: bool) -> Reply {
        self.close |= close;
        self
    }

    /// A 503 that tells the client to retry shortly.
    pub fn busy(text: &str) -> Reply {
        let mut r = Reply::text(503, text);
        r.retry_after = true;
        r
    }

    /// The response for hyper. `keep_alive` is what the `Connection` header announces; it is
    /// `close` whenever this reply itself asks for closing.
    pub fn into_response(self, keep_alive: bool) -> Response<Full<Bytes>> {
        let keep_alive = keep_alive && !self.close;
        let mut r = Response::new(Full::new(Bytes::from(self.body)));
        // Statuses are the shim's own, always in 200..=599; a bad one must still not panic.
        *r.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let h = r.headers_mut();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static(match (self.content_type, self.json) {
                (Some(t), _) => t,
                (None, true) => "application/json",
                (None, false) => "text/plain; charset=utf-8",
            }),
        );
        h.insert(
            CONNECTION,
            HeaderValue::from_static(if keep_alive { "keep-alive" } else { "close" }),
        );
        if let Some(allow) = self.allow {
            h.insert(ALLOW, HeaderValue::from_static(allow));
        }
        if self.retry_after {
            h.insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r
    }
}

/// A 500 that points at the log, where the error chain is.
pub fn internal_error() -> Reply {
    Reply::text(500, "internal error; see the orch serve log")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(r: &Response<Full<Bytes>>, name: &str) -> Option<String> {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    }

    #[test]
    fn a_reply_becomes_a_response_with_its_headers() {
        let mut r = Reply::text(405, "method not allowed");
        r.allow = Some("POST");
        let resp = r.into_response(true);
        assert_eq!(resp.status(), 405);
        assert_eq!(header(&resp, "allow").as_deref(), Some("POST"));
        assert_eq!(header(&resp, "connection").as_deref(), Some("keep-alive"));
        assert_eq!(
            header(&resp, "content-type").as_deref(),
            Some("text/plain; charset=utf-8")
        );
        assert_eq!(header(&resp, "retry-after"), None);

        let resp = Reply::busy("all workers are busy; retry shortly").into_response(true);
        assert_eq!(resp.status(), 503);
        assert_eq!(header(&resp, "retry-after").as_deref(), Some("1"));

        // A reply that leaves the request unread closes whatever the client asked for.
        let resp = Reply::text(413, "too large")
            .closing(true)
            .into_response(true);
        assert_eq!(header(&resp, "connection").as_deref(), Some("close"));
        let resp = Reply::json(&serde_json::json!({"a": 1})).into_response(false);
        assert_eq!(header(&resp, "connection").as_deref(), Some("close"));
        assert_eq!(
            header(&resp, "content-type").as_deref(),
            Some("application/json")
        );
    }

    #[test]
    fn an_impossible_status_is_a_500_not_a_panic() {
        let resp = Reply::text(1234, "x").into_response(true);
        assert_eq!(resp.status(), 500);
    }
}
