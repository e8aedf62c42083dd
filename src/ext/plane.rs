//! A small client of Plane's REST API v1 (the tracker): list a project's states, read an
//! issue's state, set it, and comment on an issue. Every call goes through the one `Http`
//! agent (timeouts) with the `X-API-Key` header.
//!
//! Deliberately not here: which state a stage maps to, caching, the "never move a done issue
//! backwards" rule (all in `ops::outbox` / `ops::notify`), and reading the token from the
//! environment (the caller passes it in). Ids are checked before they become URL path
//! segments; error texts name the call, never the token.

use serde::Deserialize;

use crate::ext::http::{CallError, GetResult, Http, Method};

/// One workflow state of a Plane project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub id: String,
    pub name: String,
    /// `backlog`, `unstarted`, `started`, `completed` or `cancelled`.
    pub group: String,
    pub default: bool,
}

/// What posting a comment did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Posted {
    Created(String),
    /// Plane already holds a comment with this external id: an earlier attempt got through.
    AlreadyThere(String),
}

pub struct Plane<'a> {
    http: &'a Http,
    base: String,
    workspace: String,
    token: String,
}

/// A Plane id (a UUID) or workspace slug: safe as one URL path segment.
pub fn valid_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[derive(Deserialize)]
struct RawState {
    id: String,
    name: String,
    #[serde(default)]
    group: String,
    #[serde(default)]
    default: bool,
}

/// A list endpoint answers either a bare array or a page `{results: […], next_cursor, …}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Listing<T> {
    Bare(Vec<T>),
    Page {
        results: Vec<T>,
        #[serde(default)]
        next_cursor: Option<String>,
        #[serde(default)]
        next_page_results: Option<bool>,
    },
}

/// An issue's `state` is an id, or the state object when expanded.
#[derive(Deserialize)]
#[serde(untagged)]
enum StateField {
    Id(String),
    Object { id: String },
}

#[derive(Deserialize)]
struct RawIssue {
    state: Option<StateField>,
}

#[derive(Deserialize)]
struct RawComment {
    #[serde(default)]
    id: Option<String>,
}

impl<'a> Plane<'a> {
    /// `base_url` like `https://plane.example` (a trailing `/` is ignored).
    pub fn new(
        http: &'a Http,
        base_url: &str,
        workspace: &str,
        token: &str,
    ) -> Result<Self, CallError> {
        if !valid_id(workspace) {
            return Err(CallError::Permanent(format!(
                "invalid plane workspace slug `{}`",
                crate::domain::ids::printable(workspace)
            )));
        }
        Ok(Plane {
            http,
            base: base_url.trim_end_matches('/').to_string(),
            workspace: workspace.to_string(),
            token: token.to_string(),
        })
    }

    fn project_url(&self, project: &str) -> Result<String, CallError> {
        check(project, "project")?;
        Ok(format!(
            "{}/api/v1/workspaces/{}/projects/{project}",
            self.base, self.workspace
        ))
    }

    fn call(
        &self,
        what: &str,
        method: Method,
        url: &str,
        body: Option<&str>,
    ) -> Result<(u16, String), CallError> {
        let r = self.http.send(
            method,
            url,
            &[("X-API-Key", &self.token), ("Accept", "application/json")],
            body,
        );
        if let Some(e) = CallError::from_result(what, &r) {
            return Err(e.redacted(&self.token));
        }
        match r {
            GetResult::Answer { status, body } => Ok((status, body)),
            _ => unreachable!("classified above"),
        }
    }

    /// Every state of `project`, in the order Plane lists them.
    pub fn states(&self, project: &str) -> Result<Vec<State>, CallError> {
        let what = "list plane states";
        let base = format!("{}/states/?per_page=100", self.project_url(project)?);
        let mut out = Vec::new();
        let mut url = base.clone();
        // A project has a handful of states; a few pages are plenty.
        for _ in 0..10 {
            let (status, body) = self.call(what, Method::Get, &url, None)?;
            if !(200..300).contains(&status) {
                return Err(CallError::from_status(what, status, &body));
            }
            let page: Listing<RawState> = serde_json::from_str(&body)
                .map_err(|e| CallError::Permanent(format!("{what}: unexpected answer: {e}")))?;
            let (items, next) = match page {
                Listing::Bare(v) => (v, None),
                Listing::Page {
                    results,
                    next_cursor,
                    next_page_results,
                } => (
                    results,
                    next_cursor.filter(|_| next_page_results == Some(true)),
                ),
            };
            out.extend(items.into_iter().map(|s| State {
                id: s.id,
                name: s.name,
                group: s.group,
                default: s.default,
            }));
            match next {
                Some(c)
                    if c.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b":-_".contains(&b)) =>
                {
                    url = format!("{base}&cursor={c}");
                }
                _ => break,
            }
        }
        Ok(out)
    }

    /// The id of the state `issue` is in.
    pub fn issue_state(&self, project: &str, issue: &str) -> Result<Option<String>, CallError> {
        let what = "read plane issue";
        check(issue, "issue")?;
        let url = format!("{}/issues/{issue}/", self.project_url(project)?);
        let (status, body) = self.call(what, Method::Get, &url, None)?;
        if !(200..300).contains(&status) {
            return Err(CallError::from_status(what, status, &body));
        }
        let raw: RawIssue = serde_json::from_str(&body)
            .map_err(|e| CallError::Permanent(format!("{what}: unexpected answer: {e}")))?;
        Ok(raw.state.map(|s| match s {
            StateField::Id(id) | StateField::Object { id } => id,
        }))
    }

    /// Move `issue` to the state `state_id`.
    pub fn set_state(&self, project: &str, issue: &str, state_id: &str) -> Result<(), CallError> {
        let what = "set plane issue state";
        check(issue, "issue")?;
        check(state_id, "state")?;
        let url = format!("{}/issues/{issue}/", self.project_url(project)?);
        let body = serde_json::json!({ "state": state_id }).to_string();
        let (status, body) = self.call(what, Method::Patch, &url, Some(&body))?;
        if !(200..300).contains(&status) {
            return Err(CallError::from_status(what, status, &body));
        }
        Ok(())
    }

    /// Post `html` as a comment on `issue`. `external_id` makes the post idempotent: Plane
    /// answers 409 to a second comment with the same external id and source.
    pub fn comment(
        &self,
        project: &str,
        issue: &str,
        html: &str,
        external_id: &str,
    ) -> Result<Posted, CallError> {
        let what = "post plane comment";
        check(issue, "issue")?;
        let url = format!("{}/issues/{issue}/comments/", self.project_url(project)?);
        let body = serde_json::json!({
            "comment_html": html,
            "external_source": "orch",
            "external_id": external_id,
        })
        .to_string();
        let (status, body) = self.call(what, Method::Post, &url, Some(&body))?;
        let id = || {
            serde_json::from_str::<RawComment>(&body)
                .ok()
                .and_then(|c| c.id)
                .unwrap_or_default()
        };
        match status {
            200..=299 => Ok(Posted::Created(id())),
            409 => Ok(Posted::AlreadyThere(id())),
            _ => Err(CallError::from_status(what, status, &body)),
        }
    }
}

fn check(id: &str, what: &str) -> Result<(), CallError> {
    if valid_id(id) {
        Ok(())
    } else {
        Err(CallError::Permanent(format!(
            "invalid plane {what} id `{}`",
            crate::domain::ids::printable(id)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_escape_a_path_segment_are_refused() {
        for ok in ["0f6c2a9e-1b2c-4d5e-8f90-123456789abc", "team", "my_ws"] {
            assert!(valid_id(ok), "{ok}");
        }
        for bad in ["", "../x", "a/b", "a?b", "a b", "a%2f", &"x".repeat(65)] {
            assert!(!valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn listings_may_be_bare_or_paged() {
        let bare: Listing<RawState> =
            serde_json::from_str(r#"[{"id":"s1","name":"Done","group":"completed"}]"#).unwrap();
        assert!(matches!(bare, Listing::Bare(v) if v.len() == 1));
        let page: Listing<RawState> = serde_json::from_str(
            r#"{"results":[{"id":"s1","name":"Done","group":"completed","default":false}],"next_cursor":"100:1:0","next_page_results":false}"#,
        )
        .unwrap();
        assert!(matches!(page, Listing::Page { results, .. } if results.len() == 1));
        let issue: RawIssue = serde_json::from_str(r#"{"id":"i","state":{"id":"s9"}}"#).unwrap();
        assert!(matches!(issue.state, Some(StateField::Object { id }) if id == "s9"));
    }
}
