//! Webhook deliveries from the tracker (Plane) and the forge (Gitea), decided without I/O
//! (SPEC §8, §9): header lookup, the delivery id, the HMAC-SHA256 signature check over the raw
//! bytes, header redaction, and the parsing of the documented payload shapes into typed,
//! validated events, plus the routing decisions over plain facts (which repo, which work item,
//! which gesture).
//!
//! Every field is validated before it is used: a payload that is well-formed JSON but not what
//! we expect yields a reason to ignore it, never a panic. This module does not read the
//! environment, the database or git; `ops::ingest` gathers those facts and applies the decision.

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::domain::ids::{WorkItem, printable, valid_prefix};
use crate::domain::stage::Stage;

/// The largest body accepted (SPEC §8).
pub const MAX_BODY: usize = 1 << 20;
/// How much of a rejected body is kept in the inbox.
pub const MAX_REJECTED_BODY: usize = 64 << 10;
/// Task titles taken from the tracker are cut to this many characters.
pub const MAX_TITLE_CHARS: usize = 500;

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

    /// Accepted deliveries are the ones a later delivery with the same id duplicates.
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
    /// The variable is set and not empty.
    Set(Vec<u8>),
    /// The block or its `webhook_secret_env` key is absent.
    NotConfigured,
    /// `webhook_secret_env` names a variable that is unset or empty.
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
                "no webhook secret is configured for `{src}`: set `{block}.webhook_secret_env` to the \
                 variable holding it (or `{block}.allow_unsigned: true`)",
                src = source.as_str(),
                block = source.config_block()
            ),
        )),
        (Secret::Unset { var }, _) => Err(Rejection::new(
            401,
            format!(
                "the webhook secret of `{}` is missing: `{var}` (named by `{}.webhook_secret_env`) \
                 is unset or empty",
                source.as_str(),
                source.config_block()
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

// ---- field access: every read checks the type, a wrong type is a reason to ignore ----

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("`{path}` must be an object"))
}

/// A field that may be absent or null.
fn field<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    m.get(key).filter(|v| !v.is_null())
}

/// A one-line string of at most `max` characters (absent or null → `None`).
fn opt_line<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    path: &str,
    max: usize,
) -> Result<Option<&'a str>, String> {
    match field(m, key) {
        None => Ok(None),
        Some(Value::String(s)) => {
            if s.chars().count() > max {
                Err(format!("`{path}` is longer than {max} characters"))
            } else if s.chars().any(char::is_control) {
                Err(format!(
                    "`{path}` contains control characters: `{}`",
                    printable(s)
                ))
            } else {
                Ok(Some(s.as_str()))
            }
        }
        Some(_) => Err(format!("`{path}` must be a string")),
    }
}

fn req_line<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    path: &str,
    max: usize,
) -> Result<&'a str, String> {
    opt_line(m, key, path, max)?.ok_or_else(|| format!("`{path}` is missing"))
}

/// A free text (control characters other than newlines and tabs replaced by spaces).
fn opt_text(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
    max: usize,
) -> Result<Option<String>, String> {
    match field(m, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(
            s.chars()
                .take(max)
                .map(|c| {
                    if c.is_control() && c != '\n' && c != '\t' {
                        ' '
                    } else {
                        c
                    }
                })
                .collect(),
        )),
        Some(_) => Err(format!("`{path}` must be a string")),
    }
}

/// An opaque id such as a Plane UUID: 1–64 characters of `[A-Za-z0-9_-]`.
fn valid_opaque_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

// ---- Plane ----

/// A Plane issue ("work item") event, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaneIssue {
    pub event: String,
    pub action: String,
    /// The issue's own id (a UUID), what the tracker client addresses it by.
    pub issue_id: Option<String>,
    /// The project's id (a UUID), what `repos[].plane_project` names.
    pub project: String,
    /// The project identifier (`SHOP`) when the payload carries it.
    pub identifier: Option<String>,
    pub sequence_id: u64,
    pub name: Option<String>,
    pub state: Option<String>,
    /// Only the labels orch understands: `auto-approve`, `auto-deploy`, `bug`.
    pub labels: Vec<String>,
    pub description: Option<String>,
}

const KNOWN_LABELS: [&str; 3] = ["auto-approve", "auto-deploy", "bug"];

/// Read a Plane delivery. `Err` is the reason to ignore it.
pub fn plane_issue(v: &Value, header_event: Option<&str>) -> Result<PlaneIssue, String> {
    let root = object(v, "body")?;
    let event = match opt_line(root, "event", "event", 64)? {
        Some(e) => e.to_string(),
        None => header_event
            .map(str::to_string)
            .ok_or("no `event` in the body or the `X-Plane-Event` header")?,
    };
    if !matches!(event.as_str(), "issue" | "work_item") {
        return Err(format!(
            "event `{}` has no action (only `issue` events are routed)",
            printable(&event)
        ));
    }
    let action = req_line(root, "action", "action", 64)?;
    match action {
        "created" | "create" | "updated" | "update" => {}
        "deleted" | "delete" => return Err("issue deleted; nothing to do".into()),
        other => return Err(format!("issue action `{}` has no action", printable(other))),
    }
    let data = object(field(root, "data").ok_or("`data` is missing")?, "data")?;
    let issue_id = match opt_line(data, "id", "data.id", 64)? {
        None => None,
        Some(i) if valid_opaque_id(i) => Some(i.to_string()),
        Some(i) => {
            return Err(format!(
                "`data.id` is not a valid issue id: `{}`",
                printable(i)
            ));
        }
    };

    let project = match field(data, "project") {
        Some(Value::String(s)) => s.as_str(),
        Some(Value::Object(p)) => req_line(p, "id", "data.project.id", 64)?,
        Some(_) => return Err("`data.project` must be a string".into()),
        None => return Err("`data.project` is missing".into()),
    };
    if !valid_opaque_id(project) {
        return Err(format!(
            "`data.project` is not a valid project id: `{}`",
            printable(project)
        ));
    }
    let identifier = match field(data, "project_detail") {
        None => None,
        Some(d) => {
            let d = object(d, "data.project_detail")?;
            match opt_line(d, "identifier", "data.project_detail.identifier", 16)? {
                None => None,
                Some(i) if valid_prefix(i) => Some(i.to_string()),
                Some(i) => {
                    return Err(format!(
                        "`data.project_detail.identifier` is not a valid work item prefix: `{}`",
                        printable(i)
                    ));
                }
            }
        }
    };
    let sequence_id = match field(data, "sequence_id") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) if s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().ok()
        }
        Some(_) => None,
        None => return Err("`data.sequence_id` is missing".into()),
    }
    .filter(|n| (1..=999_999_999).contains(n))
    .ok_or("`data.sequence_id` must be a whole number from 1 to 999999999")?;

    let name = opt_text(data, "name", "data.name", 16 * 1024)?;
    // The state is an expanded object in some versions, a UUID next to `state_detail` in
    // others.
    let state = match field(data, "state") {
        Some(Value::Object(s)) => opt_line(s, "name", "data.state.name", 255)?.map(str::to_string),
        Some(Value::String(_)) | None => match field(data, "state_detail") {
            Some(d) => {
                let d = object(d, "data.state_detail")?;
                opt_line(d, "name", "data.state_detail.name", 255)?.map(str::to_string)
            }
            None => None,
        },
        Some(_) => return Err("`data.state` must be an object or a string".into()),
    };
    let mut labels = Vec::new();
    if let Some(l) = field(data, "labels") {
        let arr = l.as_array().ok_or("`data.labels` must be an array")?;
        for (i, item) in arr.iter().enumerate() {
            let name = match item {
                Value::Object(o) => opt_line(o, "name", &format!("data.labels[{i}].name"), 255)?,
                // `label_ids`-style entries carry no name.
                Value::String(_) => None,
                _ => return Err(format!("`data.labels[{i}]` must be an object")),
            };
            if let Some(n) = name {
                let n = n.trim().to_ascii_lowercase();
                if let Some(k) = KNOWN_LABELS.iter().find(|k| **k == n)
                    && !labels.iter().any(|l: &String| l == k)
                {
                    labels.push(k.to_string());
                }
            }
        }
    }
    let description = opt_text(
        data,
        "description_stripped",
        "data.description_stripped",
        1 << 20,
    )?;
    Ok(PlaneIssue {
        event,
        action: action.to_string(),
        issue_id,
        project: project.to_string(),
        identifier,
        sequence_id,
        name,
        state,
        labels,
        description,
    })
}

/// A configured repo as the routing sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepoEntry<'a> {
    pub name: &'a str,
    pub remote: &'a str,
    pub prefix: &'a str,
    pub plane_project: Option<&'a str>,
}

/// The repo (index into `repos`) and work item a Plane issue is about.
pub fn plane_target(
    issue: &PlaneIssue,
    repos: &[RepoEntry<'_>],
) -> Result<(usize, WorkItem), String> {
    let idx = repos
        .iter()
        .position(|r| r.plane_project == Some(issue.project.as_str()))
        .ok_or_else(|| {
            format!(
                "Plane project `{}` is not in the registry (no `repos[].plane_project` names it)",
                issue.project
            )
        })?;
    let prefix = issue.identifier.as_deref().unwrap_or(repos[idx].prefix);
    let wi = WorkItem::parse(&format!("{prefix}-{}", issue.sequence_id))?;
    Ok((idx, wi))
}

/// The tracker states that act (SPEC §8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaneState {
    ToAnalyse,
    Approved,
    ConfirmDeploy,
    Stop,
    Other(String),
}

pub fn plane_state(name: &str) -> PlaneState {
    let n = name.split_whitespace().collect::<Vec<_>>().join(" ");
    let is = |s: &str| n.eq_ignore_ascii_case(s);
    if is("To Analyse") || is("To Analyze") {
        PlaneState::ToAnalyse
    } else if is("Approved") {
        PlaneState::Approved
    } else if is("Confirm Deploy") {
        PlaneState::ConfirmDeploy
    } else if is("STOP") || is("Cancelled") || is("Canceled") {
        PlaneState::Stop
    } else {
        PlaneState::Other(name.to_string())
    }
}

/// What a Plane state change asks of orch, given the newest task with that work item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlaneAction {
    /// Create the task and start it.
    Start,
    Approve,
    ConfirmDeploy,
    Cancel,
    Ignore(String),
}

/// The gesture for `state` on `wi`, whose newest task (if any) is at `stage`.
pub fn plane_action(state: &PlaneState, wi: &WorkItem, stage: Option<Stage>) -> PlaneAction {
    let ignore = |s: String| PlaneAction::Ignore(s);
    match (state, stage) {
        (PlaneState::Other(name), _) => {
            ignore(format!("state `{}` has no action", printable(name)))
        }
        // A cancelled id is tombstoned and may be started again from scratch (SPEC §3.6).
        (PlaneState::ToAnalyse, None | Some(Stage::Cancelled)) => PlaneAction::Start,
        (PlaneState::ToAnalyse, Some(Stage::Done)) => {
            ignore(format!("`{wi}` is already done; not started again"))
        }
        (PlaneState::ToAnalyse, Some(s)) => {
            ignore(format!("`{wi}` is already started (stage `{s}`)"))
        }
        (_, None) => ignore(format!(
            "no task `{wi}`; move the issue to *To Analyse* to start one"
        )),
        (PlaneState::Approved, Some(Stage::Analysis)) => PlaneAction::Approve,
        (PlaneState::Approved, Some(s)) => ignore(format!(
            "*Approved* on `{wi}` in `{s}` does nothing (it approves a task in `analysis`)"
        )),
        (PlaneState::ConfirmDeploy, Some(Stage::Deploy)) => PlaneAction::ConfirmDeploy,
        (PlaneState::ConfirmDeploy, Some(s)) => ignore(format!(
            "*Confirm Deploy* on `{wi}` in `{s}` does nothing (it confirms a task in `deploy`)"
        )),
        (PlaneState::Stop, Some(s)) if s.is_terminal() => {
            ignore(format!("`{wi}` is already `{s}`; nothing to stop"))
        }
        (PlaneState::Stop, Some(_)) => PlaneAction::Cancel,
    }
}

/// A task title from an issue name: one line, trimmed, at most 500 characters.
pub fn title_from_name(name: &str) -> Option<String> {
    let one_line: String = name
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let t: String = one_line.trim().chars().take(MAX_TITLE_CHARS).collect();
    let t = t.trim_end().to_string();
    (!t.is_empty()).then_some(t)
}

// ---- Gitea ----

/// A commit status state as Gitea names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitState {
    Pending,
    Success,
    Failure,
    Error,
    Warning,
}

impl CommitState {
    pub fn as_str(self) -> &'static str {
        match self {
            CommitState::Pending => "pending",
            CommitState::Success => "success",
            CommitState::Failure => "failure",
            CommitState::Error => "error",
            CommitState::Warning => "warning",
        }
    }

    fn parse(s: &str) -> Option<CommitState> {
        match s {
            "pending" => Some(CommitState::Pending),
            "success" => Some(CommitState::Success),
            "failure" => Some(CommitState::Failure),
            "error" => Some(CommitState::Error),
            "warning" => Some(CommitState::Warning),
            _ => None,
        }
    }

    /// Whether this state decides the development gate (success advances, failure rolls back).
    pub fn decisive(self) -> bool {
        match self {
            CommitState::Success | CommitState::Failure | CommitState::Error => true,
            CommitState::Pending | CommitState::Warning => false,
        }
    }
}

/// The `repository` object of a Gitea payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiteaRepo {
    pub name: String,
    pub full_name: Option<String>,
    pub clone_url: Option<String>,
    pub ssh_url: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GiteaEvent {
    Status {
        repo: GiteaRepo,
        sha: String,
        state: CommitState,
        context: String,
        description: String,
    },
    PullRequestMerged {
        repo: GiteaRepo,
        head_ref: String,
        base_ref: String,
        merge_commit_sha: Option<String>,
    },
}

/// `^[0-9a-f]{40}$` or `^[0-9a-f]{64}$`.
pub fn valid_sha(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn gitea_repo(root: &Map<String, Value>) -> Result<GiteaRepo, String> {
    let r = object(
        field(root, "repository").ok_or("`repository` is missing")?,
        "repository",
    )?;
    let url = |key: &str| -> Result<Option<String>, String> {
        Ok(opt_line(r, key, &format!("repository.{key}"), 1024)?.map(str::to_string))
    };
    Ok(GiteaRepo {
        name: req_line(r, "name", "repository.name", 256)?.to_string(),
        full_name: url("full_name")?,
        clone_url: url("clone_url")?,
        ssh_url: url("ssh_url")?,
    })
}

fn branch_field(m: &Map<String, Value>, path: &str) -> Result<String, String> {
    let b = object(
        field(m, path).ok_or_else(|| format!("`pull_request.{path}` is missing"))?,
        path,
    )?;
    let r = req_line(b, "ref", &format!("pull_request.{path}.ref"), 255)?;
    if !crate::domain::names::valid_branch_name(r) {
        return Err(format!(
            "`pull_request.{path}.ref` is not a valid branch name: `{}`",
            printable(r)
        ));
    }
    Ok(r.to_string())
}

/// Read a Gitea delivery. `Err` is the reason to ignore it.
pub fn gitea_event(v: &Value, header_event: Option<&str>) -> Result<GiteaEvent, String> {
    let root = object(v, "body")?;
    let kind = match header_event {
        Some(e) => e.to_string(),
        None if root.contains_key("pull_request") => "pull_request".into(),
        None if root.contains_key("sha") && root.contains_key("context") => "status".into(),
        None => return Err("no `X-Gitea-Event` header and the body is not a known event".into()),
    };
    match kind.as_str() {
        "status" => {
            let repo = gitea_repo(root)?;
            let sha = req_line(root, "sha", "sha", 64)?;
            if !valid_sha(sha) {
                return Err(format!(
                    "`sha` is not a commit id (40 or 64 lower-case hex digits): `{}`",
                    printable(sha)
                ));
            }
            let state_s = req_line(root, "state", "state", 16)?;
            let state = CommitState::parse(state_s).ok_or_else(|| {
                format!("`state` `{}` is not a commit status", printable(state_s))
            })?;
            let context = opt_line(root, "context", "context", 255)?
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .unwrap_or("default")
                .to_string();
            let description = opt_text(root, "description", "description", 500)?
                .map(|d| d.replace(['\n', '\t'], " ").trim().to_string())
                .unwrap_or_default();
            Ok(GiteaEvent::Status {
                repo,
                sha: sha.to_string(),
                state,
                context,
                description,
            })
        }
        "pull_request" => {
            let action = req_line(root, "action", "action", 64)?;
            let pr = object(
                field(root, "pull_request").ok_or("`pull_request` is missing")?,
                "pull_request",
            )?;
            let merged = match field(pr, "merged") {
                Some(Value::Bool(b)) => *b,
                None => false,
                Some(_) => return Err("`pull_request.merged` must be a boolean".into()),
            };
            if !(matches!(action, "closed" | "merged") && merged) {
                return Err(format!(
                    "pull request action `{}` (merged: {merged}) has no action",
                    printable(action)
                ));
            }
            let repo = gitea_repo(root)?;
            let head_ref = branch_field(pr, "head")?;
            let base_ref = branch_field(pr, "base")?;
            let merge_commit_sha =
                match opt_line(pr, "merge_commit_sha", "pull_request.merge_commit_sha", 64)? {
                    None => None,
                    Some(s) if valid_sha(s) => Some(s.to_string()),
                    Some(s) => {
                        return Err(format!(
                            "`pull_request.merge_commit_sha` is not a commit id: `{}`",
                            printable(s)
                        ));
                    }
                };
            Ok(GiteaEvent::PullRequestMerged {
                repo,
                head_ref,
                base_ref,
                merge_commit_sha,
            })
        }
        other => Err(format!("event `{}` has no action", printable(other))),
    }
}

/// The configured repo a Gitea repository is: by name, else by clone or ssh URL == remote.
pub fn gitea_target(repo: &GiteaRepo, repos: &[RepoEntry<'_>]) -> Result<usize, String> {
    let norm = |s: &str| s.trim_end_matches('/').trim_end_matches(".git").to_string();
    repos
        .iter()
        .position(|r| r.name == repo.name)
        .or_else(|| {
            repos.iter().position(|r| {
                [&repo.clone_url, &repo.ssh_url]
                    .into_iter()
                    .flatten()
                    .any(|u| norm(u) == norm(r.remote))
            })
        })
        .ok_or_else(|| {
            format!(
                "repository `{}` is not configured (no `repos[].name` or remote matches it)",
                printable(&repo.name)
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    fn plane(data: Value) -> Value {
        json!({"event": "issue", "action": "updated", "webhook_id": "w", "workspace_id": "ws", "data": data})
    }

    #[test]
    fn plane_issues_in_both_shapes() {
        let a = plane_issue(
            &plane(json!({
                "id": "i1", "sequence_id": 7, "name": "Add a health endpoint", "project": "p-1",
                "state": {"id": "s", "name": "To Analyse", "group": "unstarted"},
                "labels": [{"id": "l1", "name": "Bug"}, {"id": "l2", "name": "frontend"}],
                "description_stripped": null
            })),
            None,
        )
        .unwrap();
        assert_eq!(a.sequence_id, 7);
        assert_eq!(a.state.as_deref(), Some("To Analyse"));
        assert_eq!(a.labels, vec!["bug".to_string()]);
        assert_eq!(a.identifier, None);
        let b = plane_issue(
            &plane(json!({
                "sequence_id": "12", "name": "x", "project": "p-1",
                "project_detail": {"identifier": "SHOP"},
                "state": "6f0c", "state_detail": {"name": "Approved"},
                "label_ids": ["l1"], "labels": ["l1"]
            })),
            None,
        )
        .unwrap();
        assert_eq!(b.state.as_deref(), Some("Approved"));
        assert_eq!(b.identifier.as_deref(), Some("SHOP"));
        assert!(b.labels.is_empty());
    }

    #[test]
    fn unexpected_plane_payloads_are_reasons_not_panics() {
        let ok = json!({"sequence_id": 7, "name": "n", "project": "p-1", "state": {"name": "To Analyse"}});
        let mut cases: Vec<(Value, &str)> = vec![
            (json!([]), "must be an object"),
            (
                json!({"event": "project", "action": "updated", "data": {}}),
                "event `project`",
            ),
            (
                json!({"event": "issue", "action": "deleted", "data": ok.clone()}),
                "deleted",
            ),
            (
                json!({"event": "issue", "action": 3, "data": ok.clone()}),
                "`action` must be a string",
            ),
            (
                json!({"event": "issue", "action": "updated"}),
                "`data` is missing",
            ),
        ];
        for (k, v, why) in [
            ("sequence_id", json!(0), "sequence_id"),
            ("sequence_id", json!(-1), "sequence_id"),
            ("sequence_id", json!(1.5), "sequence_id"),
            ("sequence_id", json!(1e300), "sequence_id"),
            ("sequence_id", json!(1_000_000_000u64), "sequence_id"),
            ("sequence_id", json!("../../x"), "sequence_id"),
            ("project", json!("../../x"), "project id"),
            ("project", json!(7), "`data.project` must be"),
            (
                "project_detail",
                json!({"identifier": "../../x"}),
                "identifier",
            ),
            ("project_detail", json!("SHOP"), "must be an object"),
            ("state", json!(3), "`data.state` must be"),
            ("state", json!({"name": ["To Analyse"]}), "data.state.name"),
            (
                "state",
                json!({"name": "To\nAnalyse"}),
                "control characters",
            ),
            ("labels", json!({"name": "bug"}), "must be an array"),
            ("labels", json!([7]), "data.labels[0]"),
            ("labels", json!([{"name": 7}]), "data.labels[0].name"),
            ("name", json!({"x": 1}), "data.name"),
            ("description_stripped", json!(5), "description_stripped"),
        ] {
            let mut d = ok.clone();
            d[k] = v;
            cases.push((plane(d), why));
        }
        for (v, why) in cases {
            let e = plane_issue(&v, None).unwrap_err();
            assert!(e.contains(why), "{v}: {e}");
        }
    }

    #[test]
    fn plane_targets_and_actions() {
        let repos = [
            RepoEntry {
                name: "shop",
                remote: "/r/shop.git",
                prefix: "SHOP",
                plane_project: Some("p-1"),
            },
            RepoEntry {
                name: "web",
                remote: "/r/web.git",
                prefix: "WEB",
                plane_project: None,
            },
        ];
        let mut i = plane_issue(&plane(json!({"sequence_id": 7, "project": "p-1"})), None).unwrap();
        let (idx, wi) = plane_target(&i, &repos).unwrap();
        assert_eq!((idx, wi.as_str()), (0, "SHOP-7"));
        i.identifier = Some("SHP".into());
        assert_eq!(plane_target(&i, &repos).unwrap().1.as_str(), "SHP-7");
        i.project = "p-2".into();
        assert!(
            plane_target(&i, &repos)
                .unwrap_err()
                .contains("not in the registry")
        );

        let wi = WorkItem::parse("SHOP-7").unwrap();
        use PlaneAction as A;
        use PlaneState as S;
        for (state, stage, want) in [
            (S::ToAnalyse, None, Some(A::Start)),
            (S::ToAnalyse, Some(Stage::Cancelled), Some(A::Start)),
            (S::ToAnalyse, Some(Stage::Analysis), None),
            (S::ToAnalyse, Some(Stage::Done), None),
            (S::Approved, Some(Stage::Analysis), Some(A::Approve)),
            (S::Approved, Some(Stage::Deploy), None),
            (S::Approved, None, None),
            (
                S::ConfirmDeploy,
                Some(Stage::Deploy),
                Some(A::ConfirmDeploy),
            ),
            (S::ConfirmDeploy, Some(Stage::Analysis), None),
            (S::Stop, Some(Stage::Development), Some(A::Cancel)),
            (S::Stop, Some(Stage::Cancelled), None),
            (S::Stop, None, None),
            (S::Other("Backlog".into()), Some(Stage::Analysis), None),
        ] {
            let got = plane_action(&state, &wi, stage);
            match want {
                Some(w) => assert_eq!(got, w, "{state:?} {stage:?}"),
                None => assert!(
                    matches!(got, A::Ignore(ref r) if !r.is_empty()),
                    "{state:?} {stage:?}: {got:?}"
                ),
            }
        }
        assert_eq!(plane_state(" to  analyse "), S::ToAnalyse);
        assert_eq!(plane_state("STOP"), S::Stop);
        assert_eq!(plane_state("Cancelled"), S::Stop);
        assert_eq!(plane_state("confirm deploy"), S::ConfirmDeploy);
        assert_eq!(plane_state("Approved!"), S::Other("Approved!".into()));
    }

    #[test]
    fn titles_are_one_line_and_capped() {
        assert_eq!(title_from_name(" a\nb ").as_deref(), Some("a b"));
        assert_eq!(title_from_name(" \n ").as_deref(), None);
        assert_eq!(
            title_from_name(&"é".repeat(600)).unwrap().chars().count(),
            500
        );
    }

    fn status(sha: &str, state: &str) -> Value {
        json!({"sha": sha, "state": state, "context": "ci/build", "description": "Build\nfailed",
               "target_url": "http://ci", "repository": {"name": "shop", "full_name": "team/shop",
               "clone_url": "http://forge/team/shop.git"}})
    }

    #[test]
    fn gitea_events() {
        let sha = "a".repeat(40);
        match gitea_event(&status(&sha, "failure"), Some("status")).unwrap() {
            GiteaEvent::Status {
                sha: s,
                state,
                context,
                description,
                repo,
            } => {
                assert_eq!(
                    (s.as_str(), state, context.as_str()),
                    (sha.as_str(), CommitState::Failure, "ci/build")
                );
                assert_eq!(description, "Build failed");
                assert_eq!(repo.name, "shop");
            }
            other => panic!("{other:?}"),
        }
        // Without the header the shape tells.
        assert!(matches!(
            gitea_event(&status(&sha, "success"), None),
            Ok(GiteaEvent::Status { .. })
        ));
        let pr = json!({"action": "closed", "pull_request": {"merged": true, "head": {"ref": "feature/SHOP-1-x"},
                         "base": {"ref": "main"}, "merge_commit_sha": "b".repeat(40)}, "repository": {"name": "shop"}});
        assert!(matches!(
            gitea_event(&pr, Some("pull_request")),
            Ok(GiteaEvent::PullRequestMerged { ref head_ref, .. }) if head_ref == "feature/SHOP-1-x"
        ));
        for (v, ev, why) in [
            (
                status("A".repeat(40).as_str(), "success"),
                "status",
                "not a commit id",
            ),
            (status("../../x", "success"), "status", "not a commit id"),
            (
                status(&"a".repeat(39), "success"),
                "status",
                "not a commit id",
            ),
            (status(&sha, "SUCCESS"), "status", "not a commit status"),
            (
                json!({"sha": sha, "state": "success", "context": "c"}),
                "status",
                "`repository` is missing",
            ),
            (
                json!({"sha": sha, "state": "success", "context": "a\nb", "repository": {"name": "shop"}}),
                "status",
                "control",
            ),
            (
                json!({"action": "opened", "pull_request": {"merged": false}}),
                "pull_request",
                "has no action",
            ),
            (
                json!({"action": "closed", "pull_request": {"merged": "yes"}}),
                "pull_request",
                "boolean",
            ),
            (
                json!({"action": "closed", "pull_request": {"merged": true, "head": {"ref": "a\nb"}, "base": {"ref": "main"}},
                    "repository": {"name": "shop"}}),
                "pull_request",
                "control",
            ),
            (
                json!({"action": "closed", "pull_request": {"merged": true, "head": {"ref": "a..b"}, "base": {"ref": "main"}},
                    "repository": {"name": "shop"}}),
                "pull_request",
                "not a valid branch name",
            ),
            (json!({}), "push", "event `push`"),
        ] {
            let e = gitea_event(&v, Some(ev)).unwrap_err();
            assert!(e.contains(why), "{v}: {e}");
        }
    }

    #[test]
    fn gitea_repos_match_by_name_or_remote() {
        let repos = [RepoEntry {
            name: "shop",
            remote: "http://forge/team/shop.git",
            prefix: "SHOP",
            plane_project: None,
        }];
        let mut r = GiteaRepo {
            name: "shop".into(),
            full_name: None,
            clone_url: None,
            ssh_url: None,
        };
        assert_eq!(gitea_target(&r, &repos), Ok(0));
        r.name = "Shop".into();
        assert!(gitea_target(&r, &repos).is_err());
        r.clone_url = Some("http://forge/team/shop".into());
        assert_eq!(gitea_target(&r, &repos), Ok(0));
    }
}
