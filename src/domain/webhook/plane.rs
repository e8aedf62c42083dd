//! Plane deliveries, decided without I/O: the validated parse of an issue ("work item") event,
//! the repo and work item it targets, which tracker states act, the gesture a state asks of the
//! newest task with that work item, and the task title from an issue name.
//!
//! It does not look the task up or apply the gesture; `ops::ingest` does both.

use serde_json::Value;

use crate::domain::ids::{WorkItem, printable, valid_prefix};
use crate::domain::stage::Stage;

use super::fields::{RepoEntry, field, object, opt_line, opt_text, req_line};

/// Task titles taken from the tracker are cut to this many characters.
pub const MAX_TITLE_CHARS: usize = 500;

/// An opaque id such as a Plane UUID: 1–64 characters of `[A-Za-z0-9_-]`.
fn valid_opaque_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

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

/// The tracker states that act (design §8).
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
        // A cancelled id is tombstoned and may be started again from scratch (design §3.6).
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
                forge: None,
            },
            RepoEntry {
                name: "web",
                remote: "/r/web.git",
                prefix: "WEB",
                plane_project: None,
                forge: None,
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
}
