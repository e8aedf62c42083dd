//! Webhook deliveries from the tracker (Plane) and the forge (Gitea), decided without I/O
//! (design §8, §9): header lookup, the delivery id, the HMAC-SHA256 signature check over the raw
//! bytes, header redaction, and the parsing of the documented payload shapes into typed,
//! validated events, plus the routing decisions over plain facts (which repo, which work item,
//! which gesture).
//!
//! This file holds what both sources share: [`Source`], [`Outcome`], the delivery id, the body
//! digest a re-sent copy is recognised by, the size and signature check, header redaction.
//! `fields` holds [`RepoEntry`] and the typed JSON field readers both parsers use. The Plane
//! issue parse and its routing are in `plane`, the Gitea events and theirs in `gitea`; both are
//! re-exported here, so callers name `domain::webhook::*` alone.
//!
//! Every field is validated before it is used: a payload that is well-formed JSON but not what
//! we expect yields a reason to ignore it, never a panic. This module does not read the
//! environment, the database or git; `ops::ingest` gathers those facts and applies the decision.

mod fields;
mod gitea;
mod plane;

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};

pub use self::fields::RepoEntry;
pub use self::gitea::{CommitState, GiteaEvent, GiteaRepo, gitea_event, gitea_target, valid_sha};
pub use self::plane::{
    MAX_TITLE_CHARS, PlaneAction, PlaneIssue, PlaneState, plane_action, plane_issue, plane_state,
    plane_target, title_from_name,
};

/// The largest body accepted (design §8).
pub const MAX_BODY: usize = 1 << 20;
/// How much of a rejected body is kept in the inbox.
pub const MAX_REJECTED_BODY: usize = 64 << 10;

/// Who sent a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Plane,
    Gitea,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Plane => "plane",
            Source::Gitea => "gitea",
        }
    }

    pub fn parse(s: &str) -> Option<Source> {
        match s {
            "plane" => Some(Source::Plane),
            "gitea" => Some(Source::Gitea),
            _ => None,
        }
    }

    pub fn signature_header(self) -> &'static str {
        match self {
            Source::Plane => "X-Plane-Signature",
            Source::Gitea => "X-Gitea-Signature",
        }
    }

    pub fn delivery_header(self) -> &'static str {
        match self {
            Source::Plane => "X-Plane-Delivery",
            Source::Gitea => "X-Gitea-Delivery",
        }
    }

    pub fn event_header(self) -> &'static str {
        match self {
            Source::Plane => "X-Plane-Event",
            Source::Gitea => "X-Gitea-Event",
        }
    }

    /// The config block holding this source's secret (`tracker` or `forge`).
    pub fn config_block(self) -> &'static str {
        match self {
            Source::Plane => "tracker",
            Source::Gitea => "forge",
        }
    }
}

/// What became of a delivery (the `outcome` column of the inbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Processed,
    Duplicate,
    Ignored,
    Rejected,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Processed => "processed",
            Outcome::Duplicate => "duplicate",
            Outcome::Ignored => "ignored",
            Outcome::Rejected => "rejected",
        }
    }

    pub fn parse(s: &str) -> Option<Outcome> {
        match s {
            "processed" => Some(Outcome::Processed),
            "duplicate" => Some(Outcome::Duplicate),
            "ignored" => Some(Outcome::Ignored),
            "rejected" => Some(Outcome::Rejected),
            _ => None,
        }
    }

    /// Accepted deliveries are the ones a later delivery duplicates: one with the same id, or,
    /// within [`BODY_DEDUP_WINDOW_S`], one with the same body.
    pub fn accepted(self) -> bool {
        match self {
            Outcome::Processed | Outcome::Ignored => true,
            Outcome::Duplicate | Outcome::Rejected => false,
        }
    }
}

/// Why a delivery is rejected, with the HTTP status `orch serve` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub http_status: u16,
}

impl Rejection {
    fn new(http_status: u16, reason: impl Into<String>) -> Rejection {
        Rejection {
            reason: reason.into(),
            http_status,
        }
    }
}

/// The first header named `name`, compared case-insensitively.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
}

/// A delivery id we are willing to store and compare: ≤ 128 characters of `[A-Za-z0-9._:-]`.
pub fn valid_delivery_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
}

/// The delivery id: the source's header when it is valid, else `sha256:<hex of the body>`.
pub fn delivery_id(source: Source, headers: &[(String, String)], body: &[u8]) -> String {
    match header(headers, source.delivery_header()) {
        Some(id) if valid_delivery_id(id) => id.to_string(),
        _ => format!("sha256:{}", hex::encode(Sha256::digest(body))),
    }
}

/// How long an accepted body makes a re-sent copy of it a duplicate, whatever its delivery id:
/// 7 days (design §8). Senders retry within hours; older copies are rare and may be meant.
pub const BODY_DEDUP_WINDOW_S: i64 = 7 * 24 * 3600;

/// What a re-sent body is recognised by: the hex SHA-256 of the source's name, a NUL byte and
/// the raw body, so the same bytes from the other source are another delivery.
pub fn body_digest(source: Source, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(source.as_str().as_bytes());
    h.update([0u8]);
    h.update(body);
    hex::encode(h.finalize())
}

/// An event name fit for the inbox (`issue`, `status`, `pull_request`): ≤ 64 characters of
/// `[A-Za-z0-9._:-]`; anything else is recorded as `invalid`.
pub fn clean_event_name(s: &str) -> String {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
    if ok { s.to_string() } else { "invalid".into() }
}

/// The event named by the source's event header, if any.
pub fn event_header(source: Source, headers: &[(String, String)]) -> Option<String> {
    header(headers, source.event_header())
        .filter(|v| !v.is_empty())
        .map(clean_event_name)
}

/// Where a source's webhook secret stands, as the caller found it in the config and the
/// environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Secret {
    /// The secret was read and is not empty.
    Set(Vec<u8>),
    /// The block or its `webhook_secret_file`/`_env` key is absent.
    NotConfigured,
    /// The configured file or variable (`var`, its path or name) holds no secret.
    Unset { var: String },
}

/// How a delivery passed the signature check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verified {
    Signed,
    /// Accepted without a verified signature because `allow_unsigned: true`.
    Unsigned,
}

/// Size first, then the HMAC-SHA256 of the raw bytes (hex, an optional `sha256=` prefix),
/// compared in constant time. Nothing is parsed before this passes.
///
/// With a secret, a signature that is present but wrong is always rejected; only a missing one
/// is let through by `allow_unsigned`. Without a secret everything is rejected unless
/// `allow_unsigned`.
pub fn check_delivery(
    source: Source,
    secret: &Secret,
    allow_unsigned: bool,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Verified, Rejection> {
    if body.len() > MAX_BODY {
        return Err(Rejection::new(
            413,
            format!(
                "body too large ({} bytes or more; the limit is {MAX_BODY})",
                body.len()
            ),
        ));
    }
    let name = source.signature_header();
    let given = header(headers, name).filter(|v| !v.is_empty());
    match (secret, given) {
        (Secret::Set(key), Some(sig)) => {
            if verify_signature(key, body, sig) {
                Ok(Verified::Signed)
            } else {
                Err(Rejection::new(
                    401,
                    format!("bad signature in `{name}` (HMAC-SHA256 of the body does not match)"),
                ))
            }
        }
        (Secret::Set(_), None) if allow_unsigned => Ok(Verified::Unsigned),
        (Secret::Set(_), None) => Err(Rejection::new(
            401,
            format!("missing signature header `{name}`"),
        )),
        (Secret::NotConfigured | Secret::Unset { .. }, _) if allow_unsigned => {
            Ok(Verified::Unsigned)
        }
        (Secret::NotConfigured, _) => Err(Rejection::new(
            401,
            format!(
                "no webhook secret is configured for `{src}`: set `{block}.webhook_secret_file` \
                 (or `{block}.webhook_secret_env`) to where it is kept (or \
                 `{block}.allow_unsigned: true`)",
                src = source.as_str(),
                block = source.config_block()
            ),
        )),
        (Secret::Unset { var }, _) => Err(Rejection::new(
            401,
            format!(
                "the webhook secret of `{}` is missing: `{var}` (named by `{b}.webhook_secret_file` \
                 or `{b}.webhook_secret_env`) is unset, empty or unreadable",
                source.as_str(),
                b = source.config_block()
            ),
        )),
    }
}

/// Constant-time HMAC-SHA256 check of `sig` (hex, optionally `sha256=`-prefixed).
pub fn verify_signature(key: &[u8], body: &[u8], sig: &str) -> bool {
    let sig = sig.trim();
    let hex_part = sig
        .strip_prefix("sha256=")
        .or_else(|| sig.strip_prefix("SHA256="))
        .unwrap_or(sig);
    let Ok(bytes) = hex::decode(hex_part) else {
        return false;
    };
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(key) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&bytes).is_ok()
}

/// The hex HMAC-SHA256 of `body` (what a sender puts in the signature header).
pub fn sign(key: &[u8], body: &[u8]) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// Headers as they go into the inbox: names lower-cased, at most 64 of them, values cut at 1 KiB,
/// credentials replaced by `[redacted]` (authorization and cookie headers, and any value that
/// contains one of `secrets`, the configured tokens and webhook secrets).
pub fn redact_headers(headers: &[(String, String)], secrets: &[String]) -> Vec<(String, String)> {
    headers
        .iter()
        .take(64)
        .map(|(n, v)| {
            let name: String = n.trim().to_ascii_lowercase().chars().take(128).collect();
            let credential = matches!(
                name.as_str(),
                "authorization" | "proxy-authorization" | "cookie" | "set-cookie"
            );
            let leaks = secrets
                .iter()
                .any(|s| !s.is_empty() && v.contains(s.as_str()));
            let value = if credential || leaks {
                "[redacted]".to_string()
            } else {
                v.trim().chars().take(1024).collect()
            };
            (name, value)
        })
        .collect()
}

/// Parse the body as JSON; the error is the `rejected` reason.
pub fn parse_json(body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|e| format!("malformed body: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn signatures_are_checked_before_anything_else() {
        let key = Secret::Set(b"s3cret".to_vec());
        let body = br#"{"event":"issue"}"#;
        let good = sign(b"s3cret", body);
        // (name, secret, allow_unsigned, headers, verdict or HTTP status)
        type Case<'a> = (
            &'a str,
            Secret,
            bool,
            Vec<(String, String)>,
            Result<Verified, u16>,
        );
        let cases: Vec<Case> = vec![
            (
                "good",
                key.clone(),
                false,
                h(&[("X-Plane-Signature", &good)]),
                Ok(Verified::Signed),
            ),
            (
                "prefixed, other case",
                key.clone(),
                false,
                h(&[("x-plane-signature", &format!("sha256={good}"))]),
                Ok(Verified::Signed),
            ),
            (
                "upper-case hex",
                key.clone(),
                false,
                h(&[("X-Plane-Signature", &good.to_uppercase())]),
                Ok(Verified::Signed),
            ),
            (
                "wrong",
                key.clone(),
                false,
                h(&[("X-Plane-Signature", &sign(b"other", body))]),
                Err(401),
            ),
            (
                "wrong even if unsigned allowed",
                key.clone(),
                true,
                h(&[("X-Plane-Signature", &sign(b"other", body))]),
                Err(401),
            ),
            (
                "not hex",
                key.clone(),
                false,
                h(&[("X-Plane-Signature", "zz")]),
                Err(401),
            ),
            (
                "truncated",
                key.clone(),
                false,
                h(&[("X-Plane-Signature", &good[..32])]),
                Err(401),
            ),
            ("missing", key.clone(), false, vec![], Err(401)),
            (
                "missing, allowed",
                key.clone(),
                true,
                vec![],
                Ok(Verified::Unsigned),
            ),
            (
                "no secret",
                Secret::NotConfigured,
                false,
                h(&[("X-Plane-Signature", &good)]),
                Err(401),
            ),
            (
                "unset secret",
                Secret::Unset { var: "X".into() },
                false,
                vec![],
                Err(401),
            ),
            (
                "no secret, allowed",
                Secret::NotConfigured,
                true,
                vec![],
                Ok(Verified::Unsigned),
            ),
            (
                "gitea header on plane",
                key.clone(),
                false,
                h(&[("X-Gitea-Signature", &good)]),
                Err(401),
            ),
        ];
        for (name, secret, allow, headers, want) in cases {
            let got = check_delivery(Source::Plane, &secret, allow, &headers, body)
                .map_err(|r| r.http_status);
            assert_eq!(got, want, "{name}");
        }
        let big = vec![b' '; MAX_BODY + 1];
        let r = check_delivery(Source::Gitea, &key, true, &[], &big).unwrap_err();
        assert_eq!(r.http_status, 413);
        assert!(r.reason.starts_with("body too large"), "{}", r.reason);
    }

    #[test]
    fn the_reason_names_the_variable_to_set() {
        let r = check_delivery(
            Source::Gitea,
            &Secret::Unset {
                var: "GITEA_HOOK_SECRET".into(),
            },
            false,
            &[],
            b"{}",
        )
        .unwrap_err();
        assert!(
            r.reason.contains("`GITEA_HOOK_SECRET`")
                && r.reason.contains("forge.webhook_secret_env"),
            "{}",
            r.reason
        );
    }

    #[test]
    fn body_digests_tell_sources_and_bodies_apart() {
        let d = body_digest(Source::Plane, b"{}");
        assert_eq!(d.len(), 64);
        assert!(
            d.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(d, body_digest(Source::Plane, b"{}"), "stable");
        assert_ne!(d, body_digest(Source::Gitea, b"{}"), "per source");
        assert_ne!(d, body_digest(Source::Plane, b"{} "), "per byte");
        // Not the bare body hash the delivery id falls back to.
        assert_ne!(d, hex::encode(Sha256::digest(b"{}")));
        // The NUL keeps the source and the body apart.
        assert_ne!(
            body_digest(Source::Plane, b"x"),
            hex::encode(Sha256::digest(b"planex"))
        );
    }

    #[test]
    fn delivery_ids() {
        let body = b"{}";
        let hashed = format!("sha256:{}", hex::encode(Sha256::digest(body)));
        for (headers, want) in [
            (
                h(&[("X-Plane-Delivery", "f819eff4-cd50-4987")]),
                "f819eff4-cd50-4987".to_string(),
            ),
            (
                h(&[("x-plane-delivery", " a.b:c_d-1 ")]),
                "a.b:c_d-1".to_string(),
            ),
            (h(&[("X-Plane-Delivery", "../../x")]), hashed.clone()),
            (h(&[("X-Plane-Delivery", "a b")]), hashed.clone()),
            (h(&[("X-Plane-Delivery", &"a".repeat(129))]), hashed.clone()),
            (h(&[("X-Plane-Delivery", "")]), hashed.clone()),
            (h(&[("X-Gitea-Delivery", "g-1")]), hashed.clone()),
            (vec![], hashed.clone()),
        ] {
            assert_eq!(
                delivery_id(Source::Plane, &headers, body),
                want,
                "{headers:?}"
            );
        }
    }

    #[test]
    fn credentials_never_reach_the_inbox() {
        let out = redact_headers(
            &h(&[
                ("Authorization", "Bearer abc"),
                ("X-Plane-Signature", "deadbeef"),
                ("X-Token-Echo", "xx-tok123-yy"),
                ("X-Plane-Event", "issue"),
            ]),
            &["tok123".to_string()],
        );
        assert_eq!(
            out,
            h(&[
                ("authorization", "[redacted]"),
                ("x-plane-signature", "deadbeef"),
                ("x-token-echo", "[redacted]"),
                ("x-plane-event", "issue"),
            ])
        );
    }
}
