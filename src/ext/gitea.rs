//! A small client of Gitea's REST API v1 (the forge): the combined commit status of a ref,
//! the open pull request of a branch into main (found or created), and branch deletion. Every
//! call goes through the one `Http` agent (timeouts), authenticated with
//! `Authorization: token …` when a token is given.
//!
//! Deliberately not here: deciding when to merge or delete (the pipeline's job), reading the
//! token from the environment (the caller passes it in). Owner, repo and branch names are
//! checked before they become URL path segments; deleting `main`, `master` or the repo's main
//! branch is refused here, whatever the caller asks.

use serde::Deserialize;

use crate::ext::http::{CallError, GetResult, Http, Method};

/// `owner/name` of a repository on the forge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgeRepo {
    pub owner: String,
    pub name: String,
}

fn valid_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl ForgeRepo {
    /// `owner/name` as written in `repos[].forge_repo`.
    pub fn parse(s: &str) -> Option<ForgeRepo> {
        let (owner, name) = s.split_once('/')?;
        let name = name.strip_suffix(".git").unwrap_or(name);
        (valid_part(owner) && valid_part(name)).then(|| ForgeRepo {
            owner: owner.to_string(),
            name: name.to_string(),
        })
    }

    /// The last two path segments of a remote URL: `git@host:team/shop.git`,
    /// `https://host/team/shop.git`, `ssh://git@host:2222/team/shop`.
    pub fn from_remote(remote: &str) -> Option<ForgeRepo> {
        let path = match remote.split_once("://") {
            Some((_, rest)) => rest.split_once('/')?.1,
            None => remote.split_once(':')?.1,
        };
        let path = path.trim_end_matches('/');
        let mut parts = path.rsplitn(3, '/');
        let name = parts.next()?;
        let owner = parts.next()?;
        ForgeRepo::parse(&format!("{owner}/{name}"))
    }

    pub fn full(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
}

/// One status context of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub context: String,
    /// `pending`, `success`, `error`, `failure` or `warning`.
    pub state: String,
    pub description: String,
}

/// The combined status of a ref: the commit it resolved to and its contexts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Combined {
    pub sha: String,
    pub state: String,
    pub statuses: Vec<Status>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    pub number: u64,
    pub url: String,
    pub created: bool,
}

/// A pull request as the merge step reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullState {
    pub number: u64,
    pub merged: bool,
    /// Gitea's own judgement; `false` on a real conflict.
    pub mergeable: bool,
    pub merge_commit_sha: Option<String>,
    pub head_sha: Option<String>,
}

/// What `merge_pull` was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeAnswer {
    Merged,
    /// 405, 408, 409, 422 or 5xx: worth another try while the pull request is mergeable.
    Retry(String),
    /// 403, 404 or another refusal: a human must look.
    Refused(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deleted {
    Deleted,
    AlreadyGone,
    /// The branch no longer points at the commit the caller expected (a task started again
    /// with the same id pushed to it): it is kept.
    Moved(String),
}

#[derive(Deserialize)]
struct RawStatus {
    #[serde(default)]
    context: String,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

#[derive(Deserialize)]
struct RawCombined {
    #[serde(default)]
    sha: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    statuses: Option<Vec<RawStatus>>,
}

#[derive(Deserialize)]
struct RawRef {
    #[serde(default, rename = "ref")]
    name: String,
}

#[derive(Deserialize)]
struct RawPull {
    number: u64,
    #[serde(default)]
    html_url: String,
    head: Option<RawRef>,
    base: Option<RawRef>,
}

#[derive(Deserialize)]
struct RawHead {
    #[serde(default)]
    sha: Option<String>,
}

#[derive(Deserialize)]
struct RawPullState {
    number: u64,
    #[serde(default)]
    merged: bool,
    #[serde(default)]
    mergeable: bool,
    #[serde(default)]
    merge_commit_sha: Option<String>,
    #[serde(default)]
    head: Option<RawHead>,
}

pub struct Gitea<'a> {
    http: &'a Http,
    base: String,
    token: Option<String>,
}

/// A branch name as a path: each `/`-separated segment percent-encoded (Gitea's branch routes
/// take the rest of the path, slashes included).
fn branch_path(branch: &str) -> String {
    branch
        .split('/')
        .map(|seg| {
            seg.bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                        (b as char).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("/")
}

impl<'a> Gitea<'a> {
    pub fn new(http: &'a Http, base_url: &str, token: Option<&str>) -> Gitea<'a> {
        Gitea {
            http,
            base: base_url.trim_end_matches('/').to_string(),
            token: token.filter(|t| !t.is_empty()).map(str::to_string),
        }
    }

    fn repo_url(&self, repo: &ForgeRepo) -> Result<String, CallError> {
        if !(valid_part(&repo.owner) && valid_part(&repo.name)) {
            return Err(CallError::Permanent(format!(
                "invalid forge repo `{}`",
                crate::domain::ids::printable(&repo.full())
            )));
        }
        Ok(format!(
            "{}/api/v1/repos/{}/{}",
            self.base, repo.owner, repo.name
        ))
    }

    fn call(
        &self,
        what: &str,
        method: Method,
        url: &str,
        body: Option<&str>,
    ) -> Result<(u16, String), CallError> {
        let auth = self.token.as_ref().map(|t| format!("token {t}"));
        let mut headers = vec![("Accept", "application/json")];
        if let Some(a) = &auth {
            headers.push(("Authorization", a.as_str()));
        }
        let r = self.http.send(method, url, &headers, body);
        if let Some(e) = CallError::from_result(what, &r) {
            return Err(match &self.token {
                Some(t) => e.redacted(t),
                None => e,
            });
        }
        match r {
            GetResult::Answer { status, body } => Ok((status, body)),
            _ => unreachable!("classified above"),
        }
    }

    /// `GET /repos/{owner}/{repo}/commits/{ref}/status`.
    pub fn combined_status(&self, repo: &ForgeRepo, git_ref: &str) -> Result<Combined, CallError> {
        let what = "read forge commit status";
        if !crate::domain::names::valid_branch_name(git_ref)
            && !git_ref.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(CallError::Permanent(format!(
                "{what}: invalid ref `{}`",
                crate::domain::ids::printable(git_ref)
            )));
        }
        let url = format!(
            "{}/commits/{}/status",
            self.repo_url(repo)?,
            branch_path(git_ref)
        );
        let (status, body) = self.call(what, Method::Get, &url, None)?;
        if !(200..300).contains(&status) {
            return Err(CallError::from_status(what, status, &body));
        }
        let raw: RawCombined = serde_json::from_str(&body)
            .map_err(|e| CallError::Permanent(format!("{what}: unexpected answer: {e}")))?;
        Ok(Combined {
            sha: raw.sha,
            state: raw.state,
            statuses: raw
                .statuses
                .unwrap_or_default()
                .into_iter()
                .map(|s| Status {
                    context: s.context,
                    state: s.status.or(s.state).unwrap_or_default(),
                    description: s.description.unwrap_or_default(),
                })
                .collect(),
        })
    }

    /// The open pull request of `branch` into `base`, created with `title`/`body` when there is
    /// none.
    pub fn find_or_create_pr(
        &self,
        repo: &ForgeRepo,
        branch: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<PullRequest, CallError> {
        if let Some(pr) = self.find_open_pr(repo, branch, base)? {
            return Ok(pr);
        }
        let what = "create forge pull request";
        let url = format!("{}/pulls", self.repo_url(repo)?);
        let req = serde_json::json!({ "head": branch, "base": base, "title": title, "body": body })
            .to_string();
        let (status, answer) = self.call(what, Method::Post, &url, Some(&req))?;
        match status {
            200..=299 => {
                let raw: RawPull = serde_json::from_str(&answer)
                    .map_err(|e| CallError::Permanent(format!("{what}: unexpected answer: {e}")))?;
                Ok(PullRequest {
                    number: raw.number,
                    url: raw.html_url,
                    created: true,
                })
            }
            // Someone opened it meanwhile.
            409 => self
                .find_open_pr(repo, branch, base)?
                .ok_or_else(|| CallError::from_status(what, status, &answer)),
            _ => Err(CallError::from_status(what, status, &answer)),
        }
    }

    /// `GET /repos/{owner}/{repo}/pulls/{number}`.
    pub fn pull(&self, repo: &ForgeRepo, number: u64) -> Result<PullState, CallError> {
        let what = "read forge pull request";
        let url = format!("{}/pulls/{number}", self.repo_url(repo)?);
        let (status, body) = self.call(what, Method::Get, &url, None)?;
        if !(200..300).contains(&status) {
            return Err(CallError::from_status(what, status, &body));
        }
        let raw: RawPullState = serde_json::from_str(&body)
            .map_err(|e| CallError::Permanent(format!("{what}: unexpected answer: {e}")))?;
        let sha = |s: Option<String>| {
            s.filter(|s| s.len() >= 7 && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        };
        Ok(PullState {
            number: raw.number,
            merged: raw.merged,
            mergeable: raw.mergeable,
            merge_commit_sha: sha(raw.merge_commit_sha),
            head_sha: sha(raw.head.and_then(|h| h.sha)),
        })
    }

    /// `POST /repos/{owner}/{repo}/pulls/{number}/merge` with `Do: <style>` and the head the
    /// merge must be of (`head_commit_id`: Gitea refuses when the branch moved).
    pub fn merge_pull(
        &self,
        repo: &ForgeRepo,
        number: u64,
        style: &str,
        head_sha: &str,
    ) -> Result<MergeAnswer, CallError> {
        let what = "merge forge pull request";
        let url = format!("{}/pulls/{number}/merge", self.repo_url(repo)?);
        let req = serde_json::json!({ "Do": style, "head_commit_id": head_sha }).to_string();
        let (status, body) = match self.call(what, Method::Post, &url, Some(&req)) {
            Ok(a) => a,
            Err(CallError::Transient { message, .. }) => return Ok(MergeAnswer::Retry(message)),
            Err(e) => return Err(e),
        };
        let said = |s: u16| {
            format!(
                "{what}: HTTP {s}: {}",
                body.chars().take(200).collect::<String>()
            )
        };
        Ok(match status {
            200..=299 => MergeAnswer::Merged,
            405 | 408 | 409 | 422 | 500..=599 => MergeAnswer::Retry(said(status)),
            _ => MergeAnswer::Refused(said(status)),
        })
    }

    /// The pull request of `branch` into `base` in any state (open, or merged already).
    pub fn find_pr_any(
        &self,
        repo: &ForgeRepo,
        branch: &str,
        base: &str,
    ) -> Result<Option<u64>, CallError> {
        Ok(self
            .find_pull(repo, branch, base, "all", true)?
            .map(|p| p.number))
    }

    fn find_open_pr(
        &self,
        repo: &ForgeRepo,
        branch: &str,
        base: &str,
    ) -> Result<Option<PullRequest>, CallError> {
        Ok(self
            .find_pull(repo, branch, base, "open", false)?
            .map(|p| PullRequest {
                number: p.number,
                url: p.html_url,
                created: false,
            }))
    }

    /// The pull request of `branch` into `base` among those in `state` (`open`, `all`), 50 a
    /// page and 20 pages at most: the first match of the first page that has one, or its last
    /// when `last_in_page`.
    fn find_pull(
        &self,
        repo: &ForgeRepo,
        branch: &str,
        base: &str,
        state: &str,
        last_in_page: bool,
    ) -> Result<Option<RawPull>, CallError> {
        let what = "list forge pull requests";
        let root = self.repo_url(repo)?;
        for page in 1..=20 {
            let url = format!("{root}/pulls?state={state}&limit=50&page={page}");
            let (status, body) = self.call(what, Method::Get, &url, None)?;
            if !(200..300).contains(&status) {
                return Err(CallError::from_status(what, status, &body));
            }
            let pulls: Vec<RawPull> = serde_json::from_str(&body)
                .map_err(|e| CallError::Permanent(format!("{what}: unexpected answer: {e}")))?;
            let full = pulls.len() >= 50;
            let mut matching = pulls.into_iter().filter(|p| {
                p.head.as_ref().is_some_and(|h| h.name == branch)
                    && p.base.as_ref().is_some_and(|b| b.name == base)
            });
            let found = if last_in_page {
                matching.next_back()
            } else {
                matching.next()
            };
            if found.is_some() || !full {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// `DELETE /repos/{owner}/{repo}/branches/{branch}`. Refuses `main`, `master` and `main`
    /// (the repo's main branch) before anything is sent; a branch already gone is not an error.
    /// Delete `branch` (never a main branch). With `expect`, only while it still points at that
    /// commit.
    pub fn delete_branch(
        &self,
        repo: &ForgeRepo,
        branch: &str,
        main: &str,
        expect: Option<&str>,
    ) -> Result<Deleted, CallError> {
        let what = "delete forge branch";
        if branch == "main" || branch == "master" || branch == main {
            return Err(CallError::Permanent(format!(
                "refusing to delete branch `{branch}` of `{}`: it is a main branch",
                repo.full()
            )));
        }
        if !crate::domain::names::valid_branch_name(branch) {
            return Err(CallError::Permanent(format!(
                "{what}: invalid branch name `{}`",
                crate::domain::ids::printable(branch)
            )));
        }
        let url = format!("{}/branches/{}", self.repo_url(repo)?, branch_path(branch));
        if let Some(sha) = expect {
            // The API has no conditional delete: look first. The window between the two calls
            // is the API's; the cancel that queued this was long before.
            let (status, body) = self.call("read forge branch", Method::Get, &url, None)?;
            match status {
                404 => return Ok(Deleted::AlreadyGone),
                200..=299 => {
                    let head = serde_json::from_str::<BranchDoc>(&body)
                        .map(|b| b.commit.id)
                        .map_err(|e| {
                            CallError::Permanent(format!("{what}: bad branch JSON: {e}"))
                        })?;
                    if !head.eq_ignore_ascii_case(sha) {
                        return Ok(Deleted::Moved(head));
                    }
                }
                _ => return Err(CallError::from_status(what, status, &body)),
            }
        }
        let (status, body) = self.call(what, Method::Delete, &url, None)?;
        match status {
            200..=299 => Ok(Deleted::Deleted),
            404 => Ok(Deleted::AlreadyGone),
            _ => Err(CallError::from_status(what, status, &body)),
        }
    }
}

/// The part of Gitea's branch document a conditional delete reads.
#[derive(Deserialize)]
struct BranchDoc {
    commit: BranchCommit,
}

#[derive(Deserialize)]
struct BranchCommit {
    id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forge_repos_come_from_config_or_remote_urls() {
        let r = |o: &str, n: &str| {
            Some(ForgeRepo {
                owner: o.into(),
                name: n.into(),
            })
        };
        assert_eq!(ForgeRepo::parse("team/shop"), r("team", "shop"));
        assert_eq!(ForgeRepo::parse("team/shop.git"), r("team", "shop"));
        for (url, want) in [
            ("git@forge.example:team/shop.git", r("team", "shop")),
            ("https://forge.example/team/shop.git", r("team", "shop")),
            ("https://forge.example/git/team/shop/", r("team", "shop")),
            ("ssh://git@forge.example:2222/team/shop", r("team", "shop")),
            ("/srv/git/shop.git", None),
            ("shop.git", None),
        ] {
            assert_eq!(ForgeRepo::from_remote(url), want, "{url}");
        }
        for bad in [
            "team",
            "team/",
            "/shop",
            "../x/y",
            "te am/shop",
            "team/sh;op",
            "a/.git",
        ] {
            assert_eq!(ForgeRepo::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn branch_paths_keep_slashes_and_escape_the_rest() {
        assert_eq!(branch_path("feature/SHOP-1-x"), "feature/SHOP-1-x");
        assert_eq!(branch_path("a+b/c d"), "a%2Bb/c%20d");
    }

    #[test]
    fn main_branches_are_never_deleted() {
        let http = Http::new(std::time::Duration::from_millis(200));
        // Nothing listens on port 9 of 127.0.0.1; a request would be unreachable, not refused.
        let g = Gitea::new(&http, "http://127.0.0.1:9", None);
        let repo = ForgeRepo::parse("team/shop").unwrap();
        for b in ["main", "master", "trunk"] {
            let e = g.delete_branch(&repo, b, "trunk", None).unwrap_err();
            assert!(
                matches!(&e, CallError::Permanent(m) if m.contains("refusing")),
                "{b}: {e}"
            );
        }
    }
}
