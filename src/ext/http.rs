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

    pub fn get(&self, url: &str) -> GetResult {
        match self.agent.get(url).call() {
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
                other => GetResult::Invalid(other.to_string()),
            },
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
