//! The one HTTP door: a `ureq` agent with timeouts, used for the runners' read-only smoke
//! checks (and, later, the tracker/forge/chat clients). It tells a connection failure (worth a
//! retry) from an answer (a status and a body, capped at 1 MiB).

use std::time::Duration;

/// What a GET got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GetResult {
    Answer {
        status: u16,
        body: String,
    },
    /// No answer: refused, unreachable, timed out, DNS — worth a retry.
    Unreachable(String),
    /// The request could not be made at all (a malformed URL, …) — not worth a retry.
    Invalid(String),
}

pub struct Http {
    agent: ureq::Agent,
}

impl Http {
    pub fn new(timeout: Duration) -> Http {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Http { agent }
    }

    /// A plain GET (the runners' smoke checks).
    pub fn get(&self, url: &str) -> GetResult {
        self.send(Method::Get, url, &[], None)
    }

    /// One request with `headers` and, for POST and PATCH, a JSON body; the answer is told
    /// apart like `get`'s. Error texts never contain the URL (a token may be part of it).
    pub fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        json: Option<&str>,
    ) -> GetResult {
        let result = match method {
            Method::Get | Method::Delete => {
                let mut req = match method {
                    Method::Get => self.agent.get(url),
                    _ => self.agent.delete(url),
                };
                for (k, v) in headers {
                    req = req.header(*k, *v);
                }
                req.call()
            }
            Method::Post | Method::Patch => {
                let mut req = match method {
                    Method::Post => self.agent.post(url),
                    _ => self.agent.patch(url),
                };
                for (k, v) in headers {
                    req = req.header(*k, *v);
                }
                req.header("Content-Type", "application/json")
                    .send(json.unwrap_or("{}"))
            }
        };
        match result {
            Ok(mut resp) => {
                let status = resp.status().as_u16();
                let body = resp
                    .body_mut()
                    .with_config()
                    .limit(1 << 20)
                    .read_to_string()
                    .unwrap_or_default();
                GetResult::Answer { status, body }
            }
            Err(e) => match e {
                ureq::Error::Io(_)
                | ureq::Error::ConnectionFailed
                | ureq::Error::HostNotFound
                | ureq::Error::Timeout(_) => GetResult::Unreachable(e.to_string()),
                ureq::Error::BadUri(_) => GetResult::Invalid("malformed URL".into()),
                other => GetResult::Invalid(other.to_string()),
            },
        }
    }
}

/// The methods the outbound clients use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Patch,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

/// Why a call to a tracker, forge or chat service did not succeed, and whether trying again
/// later can help. The text names the call, never its URL or credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// Unreachable, timed out, rate limited or a server error: worth a retry (after
    /// `retry_after_s` when the service said so). `unreachable` marks a service that did not
    /// answer at all, so the rest of a pass can skip it.
    Transient {
        message: String,
        retry_after_s: Option<u64>,
        unreachable: bool,
    },
    /// The service refused the request itself (bad request, not found, gone): retrying the
    /// same request cannot help.
    Permanent(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Transient { message, .. } | CallError::Permanent(message) => {
                f.write_str(message)
            }
        }
    }
}

impl CallError {
    /// Classify a non-success answer of `what` (e.g. "PATCH plane issue"). 401 and 403 are
    /// transient: they usually mean a token an operator is about to fix.
    pub fn from_status(what: &str, status: u16, body: &str) -> CallError {
        let snippet: String = body.chars().filter(|c| !c.is_control()).take(200).collect();
        let message = format!("{what}: HTTP {status} {snippet}")
            .trim_end()
            .to_string();
        match status {
            400 | 404 | 405 | 410 | 413 | 414 | 422 => CallError::Permanent(message),
            _ => CallError::Transient {
                message,
                retry_after_s: None,
                unreachable: false,
            },
        }
    }

    /// Classify a result that is not an answer.
    pub fn from_result(what: &str, r: &GetResult) -> Option<CallError> {
        match r {
            GetResult::Answer { .. } => None,
            GetResult::Unreachable(e) => Some(CallError::Transient {
                message: format!("{what}: unreachable: {e}"),
                retry_after_s: None,
                unreachable: true,
            }),
            GetResult::Invalid(e) => Some(CallError::Permanent(format!("{what}: {e}"))),
        }
    }

    /// The same error with every occurrence of `secret` replaced (a token in a URL path).
    pub fn redacted(self, secret: &str) -> CallError {
        let r = |s: String| {
            if secret.is_empty() {
                s
            } else {
                s.replace(secret, "<redacted>")
            }
        };
        match self {
            CallError::Transient {
                message,
                retry_after_s,
                unreachable,
            } => CallError::Transient {
                message: r(message),
                retry_after_s,
                unreachable,
            },
            CallError::Permanent(m) => CallError::Permanent(r(m)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn answers_refusals_and_bad_urls_are_told_apart() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            s.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close\r\n\r\ndown")
                .unwrap();
        });
        let http = Http::new(Duration::from_secs(5));
        assert_eq!(
            http.get(&format!("http://{addr}/health")),
            GetResult::Answer {
                status: 503,
                body: "down".into()
            }
        );
        server.join().unwrap();
        // Nothing listens there any more.
        assert!(matches!(
            http.get(&format!("http://{addr}/")),
            GetResult::Unreachable(_)
        ));
        assert!(matches!(
            http.get("not a url"),
            GetResult::Invalid(_) | GetResult::Unreachable(_)
        ));
    }
}
