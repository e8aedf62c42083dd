//! Gitea deliveries, decided without I/O: the validated parse of a commit `status` or a merged
//! `pull_request` event, the commit state and whether it decides the development gate, the
//! configured repo a Gitea repository is, and the commit id rule.
//!
//! It does not read git or the database; `ops::ingest` records the status, finds the task whose
//! head the sha is, and applies the decision.

use serde_json::{Map, Value};

use crate::domain::ids::printable;

use super::fields::{RepoEntry, field, object, opt_line, opt_text, req_line};

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

/// The configured repo a Gitea repository is: its `full_name` (`owner/name`) against each
/// repo's forge `owner/name` (Gitea's names are unique without regard to case), or, when the
/// payload has no `full_name`, its clone or ssh URL against `remote`. Never the bare name: two
/// owners may each have a repo of that name, and only one of them is ours.
pub fn gitea_target(repo: &GiteaRepo, repos: &[RepoEntry<'_>]) -> Result<usize, String> {
    let norm = |s: &str| s.trim_end_matches('/').trim_end_matches(".git").to_string();
    let (what, found): (&str, Vec<usize>) = match &repo.full_name {
        Some(full) => (
            full,
            repos
                .iter()
                .enumerate()
                .filter(|(_, r)| {
                    r.forge
                        .as_deref()
                        .is_some_and(|f| f.eq_ignore_ascii_case(full))
                })
                .map(|(i, _)| i)
                .collect(),
        ),
        None => (
            &repo.name,
            repos
                .iter()
                .enumerate()
                .filter(|(_, r)| {
                    [&repo.clone_url, &repo.ssh_url]
                        .into_iter()
                        .flatten()
                        .any(|u| norm(u) == norm(r.remote))
                })
                .map(|(i, _)| i)
                .collect(),
        ),
    };
    match found.as_slice() {
        [i] => Ok(*i),
        [] => Err(format!(
            "repository `{}` is not configured (no `repos[].forge_repo`, or owner/name read from \
             `remote`, matches its full name; without one, no `remote` matches its URL)",
            printable(what)
        )),
        many => Err(format!(
            "repository `{}` matches more than one configured repo ({}); give each its own \
             `repos[].forge_repo`",
            printable(what),
            many.iter()
                .map(|&i| format!("`{}`", repos[i].name))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    fn entry<'a>(name: &'a str, remote: &'a str, forge: Option<&str>) -> RepoEntry<'a> {
        RepoEntry {
            name,
            remote,
            prefix: "SHOP",
            plane_project: None,
            forge: forge.map(String::from),
        }
    }

    fn gitea_repo(name: &str, full_name: Option<&str>, clone_url: Option<&str>) -> GiteaRepo {
        GiteaRepo {
            name: name.into(),
            full_name: full_name.map(String::from),
            clone_url: clone_url.map(String::from),
            ssh_url: None,
        }
    }

    /// Two owners each had a repo `shop`; a status of `fork/shop` was recorded for the
    /// configured `shop` of `team`, because the bare name matched first.
    #[test]
    fn gitea_repos_match_by_owner_and_name_never_by_the_bare_name() {
        let repos = [
            entry("shop", "/srv/git/shop.git", Some("team/shop")),
            entry("shop-fork", "/srv/git/fork.git", Some("fork/shop")),
            entry("web", "http://forge/team/web.git", None),
        ];
        // (payload name, full_name, clone_url) → the configured repo, or a reason naming it.
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
            Result<usize, &'a str>,
        );
        let cases: [Case; 9] = [
            ("shop", Some("team/shop"), None, Ok(0)),
            ("shop", Some("fork/shop"), None, Ok(1)),
            // Gitea's owner and repo names are unique without regard to case.
            ("Shop", Some("Fork/Shop"), None, Ok(1)),
            (
                "shop",
                Some("other/shop"),
                None,
                Err("`other/shop` is not configured"),
            ),
            // The bare name alone never picks a repo.
            ("shop", None, None, Err("`shop` is not configured")),
            ("web", None, None, Err("`web` is not configured")),
            // Without a full name, the clone URL must be the configured remote.
            ("web", None, Some("http://forge/team/web"), Ok(2)),
            ("x", None, Some("http://forge/team/web.git/"), Ok(2)),
            (
                "web",
                None,
                Some("http://forge/other/web.git"),
                Err("not configured"),
            ),
        ];
        for (name, full, url, want) in cases {
            let got = gitea_target(&gitea_repo(name, full, url), &repos);
            match (got, want) {
                (Ok(i), Ok(j)) => assert_eq!(i, j, "{name} {full:?} {url:?}"),
                (Err(e), Err(why)) => assert!(e.contains(why), "{name} {full:?}: {e}"),
                (got, want) => panic!("{name} {full:?} {url:?}: {got:?}, want {want:?}"),
            }
        }
        // Two configured repos naming one forge repo: neither is picked.
        let twice = [
            entry("shop", "/a.git", Some("team/shop")),
            entry("shop2", "/b.git", Some("team/shop")),
        ];
        let e = gitea_target(&gitea_repo("shop", Some("team/shop"), None), &twice).unwrap_err();
        assert!(e.contains("more than one"), "{e}");
    }
}
