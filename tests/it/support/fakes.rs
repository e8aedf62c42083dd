//! Small stateful fakes of Plane, Gitea and Telegram, each a handler on the one fake HTTP server
//! ([`super::fake_http`]): holding what the real service would (projects, states, issues,
//! comments; repos, branches, statuses, pull requests; messages), counting every write, and able
//! to fail on demand through their server's [`Mode`]. Point orch at `fake.url()` in the config.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

pub use super::fake_http::Mode;
use super::fake_http::{Request, Server};

// ------------------------------------------------------------------------------ routing

fn segments(route: &str) -> Vec<&str> {
    route.trim_matches('/').split('/').collect()
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ------------------------------------------------------------------------------ Plane

#[derive(Debug, Clone)]
pub struct PlaneState {
    pub id: String,
    pub name: String,
    pub group: String,
    pub default: bool,
}

#[derive(Debug, Clone)]
pub struct PlaneComment {
    pub html: String,
    pub external_id: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct PlaneIssue {
    pub state: String,
    pub comments: Vec<PlaneComment>,
    /// The name of every state the issue was moved to through the API, in order.
    pub moves: Vec<String>,
}

#[derive(Debug, Default)]
pub struct PlaneData {
    pub states: BTreeMap<String, Vec<PlaneState>>,
    pub issues: BTreeMap<(String, String), PlaneIssue>,
    pub state_patches: usize,
    pub comment_posts: usize,
    pub duplicate_comments_refused: usize,
    pub state_lists: usize,
}

pub struct Plane {
    pub server: Server,
    pub data: Arc<Mutex<PlaneData>>,
}

/// The states of a usual Plane project set up for orch (names of the issue), ids `<name>-id`.
pub const PLANE_STATES: &[(&str, &str)] = &[
    ("Backlog", "backlog"),
    ("To Analyse", "unstarted"),
    ("Analysis", "started"),
    ("In Review", "started"),
    ("Approved", "started"),
    ("Architecture", "started"),
    ("Development", "started"),
    ("Code-Review", "started"),
    ("Testing", "started"),
    ("Awaiting Deploy", "started"),
    ("Confirm Deploy", "started"),
    ("Deploying", "started"),
    ("Monitoring after Deploy", "started"),
    ("Blocked", "started"),
    ("Needs Input", "started"),
    ("Done", "completed"),
    ("Cancelled", "cancelled"),
];

pub fn state_id(name: &str) -> String {
    format!("{}-id", name.to_lowercase().replace(' ', "-"))
}

impl Plane {
    /// A fake Plane for workspace `workspace` that accepts `X-API-Key: <token>`.
    pub fn start(workspace: &str, token: &str) -> Plane {
        let data = Arc::new(Mutex::new(PlaneData::default()));
        let d = data.clone();
        let ws = workspace.to_string();
        let token = token.to_string();
        let handler = move |r: &Request| -> (u16, Value) {
            if r.header("x-api-key") != Some(token.as_str()) {
                return (401, json!({"error": "authentication failed"}));
            }
            let seg = segments(r.route());
            let mut d = d.lock().unwrap();
            match (r.method.as_str(), seg.as_slice()) {
                ("GET", ["api", "v1", "workspaces", w, "projects", p, "states"]) if *w == ws => {
                    d.state_lists += 1;
                    let Some(states) = d.states.get(*p) else {
                        return (404, json!({"error": "project not found"}));
                    };
                    let results: Vec<Value> = states
                        .iter()
                        .map(|s| {
                            json!({"id": s.id, "name": s.name, "group": s.group, "default": s.default})
                        })
                        .collect();
                    (
                        200,
                        json!({"results": results, "next_cursor": "100:1:0", "next_page_results": false}),
                    )
                }
                ("GET", ["api", "v1", "workspaces", w, "projects", p, "issues", i]) if *w == ws => {
                    match d.issues.get(&(p.to_string(), i.to_string())) {
                        Some(issue) => (200, json!({"id": i, "state": issue.state})),
                        None => (404, json!({"error": "issue not found"})),
                    }
                }
                ("PATCH", ["api", "v1", "workspaces", w, "projects", p, "issues", i])
                    if *w == ws =>
                {
                    let body = r.json();
                    let Some(state) = body["state"].as_str() else {
                        return (400, json!({"error": "state required"}));
                    };
                    let Some(name) = d
                        .states
                        .get(*p)
                        .and_then(|v| v.iter().find(|s| s.id == state))
                        .map(|s| s.name.clone())
                    else {
                        return (400, json!({"error": "unknown state"}));
                    };
                    let key = (p.to_string(), i.to_string());
                    let Some(issue) = d.issues.get_mut(&key) else {
                        return (404, json!({"error": "issue not found"}));
                    };
                    issue.state = state.to_string();
                    issue.moves.push(name);
                    d.state_patches += 1;
                    (200, json!({"id": i, "state": state}))
                }
                (
                    "POST",
                    [
                        "api",
                        "v1",
                        "workspaces",
                        w,
                        "projects",
                        p,
                        "issues",
                        i,
                        "comments",
                    ],
                ) if *w == ws => {
                    let body = r.json();
                    let external = body["external_id"].as_str().map(str::to_string);
                    let key = (p.to_string(), i.to_string());
                    let dup = external.is_some()
                        && d.issues
                            .values()
                            .any(|is| is.comments.iter().any(|c| c.external_id == external));
                    if dup {
                        d.duplicate_comments_refused += 1;
                        return (
                            409,
                            json!({"error": "Issue Comment with the same external id and external source already exists", "id": "dup"}),
                        );
                    }
                    let n = d.comment_posts + 1;
                    let Some(issue) = d.issues.get_mut(&key) else {
                        return (404, json!({"error": "issue not found"}));
                    };
                    let id = format!("comment-{n}");
                    issue.comments.push(PlaneComment {
                        html: body["comment_html"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        external_id: external,
                    });
                    d.comment_posts += 1;
                    (201, json!({"id": id}))
                }
                _ => (404, json!({"error": "no route"})),
            }
        };
        Plane {
            server: Server::json(handler),
            data,
        }
    }

    /// A project with the usual states (see [`PLANE_STATES`]; `Backlog` is the default).
    pub fn add_project(&self, project: &str) {
        self.add_project_with(project, PLANE_STATES);
    }

    pub fn add_project_with(&self, project: &str, states: &[(&str, &str)]) {
        let v = states
            .iter()
            .map(|(name, group)| PlaneState {
                id: state_id(name),
                name: name.to_string(),
                group: group.to_string(),
                default: *name == "Backlog",
            })
            .collect();
        self.data
            .lock()
            .unwrap()
            .states
            .insert(project.to_string(), v);
    }

    /// An issue in state `state` (a name).
    pub fn add_issue(&self, project: &str, issue: &str, state: &str) {
        self.data.lock().unwrap().issues.insert(
            (project.to_string(), issue.to_string()),
            PlaneIssue {
                state: state_id(state),
                ..PlaneIssue::default()
            },
        );
    }

    pub fn issue(&self, project: &str, issue: &str) -> PlaneIssue {
        self.data
            .lock()
            .unwrap()
            .issues
            .get(&(project.to_string(), issue.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    /// Writes (PATCH and POST) the fake received.
    pub fn writes(&self) -> usize {
        let d = self.data.lock().unwrap();
        d.state_patches + d.comment_posts + d.duplicate_comments_refused
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    pub fn set_mode(&self, m: Mode) {
        self.server.set_mode(m)
    }
}

// ------------------------------------------------------------------------------ Gitea

#[derive(Debug, Clone)]
pub struct GiteaStatus {
    pub context: String,
    pub state: String,
    pub description: String,
}

#[derive(Debug, Clone)]
pub struct GiteaPull {
    pub number: u64,
    pub head: String,
    pub base: String,
    pub title: String,
    pub open: bool,
    pub merged: bool,
    pub merge_commit_sha: Option<String>,
}

#[derive(Debug, Default)]
pub struct GiteaData {
    /// (owner/repo, branch) → head sha.
    pub branches: BTreeMap<(String, String), String>,
    /// (owner/repo, sha) → statuses.
    pub statuses: BTreeMap<(String, String), Vec<GiteaStatus>>,
    pub pulls: BTreeMap<String, Vec<GiteaPull>>,
    /// Every branch delete asked for: (owner/repo, branch), whether it existed or not.
    pub deletes: Vec<(String, String)>,
    pub status_reads: usize,
    pub pulls_created: usize,
    /// With a bare git remote set for a repo, a branch missing from `branches` is read from it,
    /// and `default_status` (if any) answers for its head.
    pub remotes: BTreeMap<String, PathBuf>,
    pub default_status: Option<GiteaStatus>,
    /// Answers the merge endpoint gives before it merges (a 502, say), first to last.
    pub merge_script: std::collections::VecDeque<u16>,
    /// Say "merged" without touching the bare remote (a forge that lies).
    pub merge_lies: bool,
    /// Merges performed (each moved the base branch of the bare remote).
    pub merges: usize,
    /// Every call of the merge endpoint.
    pub merge_calls: usize,
}

pub struct Gitea {
    pub server: Server,
    pub data: Arc<Mutex<GiteaData>>,
}

impl Gitea {
    /// A fake Gitea that requires `Authorization: token <token>` for writes.
    pub fn start(token: &str) -> Gitea {
        let data = Arc::new(Mutex::new(GiteaData::default()));
        let d = data.clone();
        let token = format!("token {token}");
        let handler = move |r: &Request| -> (u16, Value) {
            let authed = r.header("authorization") == Some(token.as_str());
            let route = r.route().to_string();
            let seg = segments(&route);
            let mut d = d.lock().unwrap();
            if seg.len() < 5 || seg[..3] != ["api", "v1", "repos"] {
                return (404, json!({"message": "no route"}));
            }
            let repo = format!("{}/{}", seg[3], seg[4]);
            let rest = &seg[5..];
            match (r.method.as_str(), rest) {
                ("GET", ["commits", tail @ ..]) if tail.last() == Some(&"status") => {
                    d.status_reads += 1;
                    let git_ref = decode(&tail[..tail.len() - 1].join("/"));
                    let sha = match d.branches.get(&(repo.clone(), git_ref.clone())) {
                        Some(s) => s.clone(),
                        None => match d
                            .remotes
                            .get(&repo)
                            .and_then(|p| super::branch_head(p, &git_ref))
                        {
                            Some(s) => s,
                            None if git_ref.len() == 40 => git_ref.clone(),
                            None => return (404, json!({"message": "ref not found"})),
                        },
                    };
                    let statuses = d
                        .statuses
                        .get(&(repo.clone(), sha.clone()))
                        .cloned()
                        .or_else(|| d.default_status.clone().map(|s| vec![s]))
                        .unwrap_or_default();
                    let combined = if statuses
                        .iter()
                        .any(|s| s.state == "failure" || s.state == "error")
                    {
                        "failure"
                    } else if !statuses.is_empty() && statuses.iter().all(|s| s.state == "success")
                    {
                        "success"
                    } else {
                        "pending"
                    };
                    let list: Vec<Value> = statuses
                        .iter()
                        .map(|s| json!({"context": s.context, "status": s.state, "description": s.description}))
                        .collect();
                    (
                        200,
                        json!({"sha": sha, "state": combined, "statuses": list, "total_count": list.len()}),
                    )
                }
                ("DELETE", ["branches", tail @ ..]) => {
                    if !authed {
                        return (401, json!({"message": "token required"}));
                    }
                    let branch = decode(&tail.join("/"));
                    d.deletes.push((repo.clone(), branch.clone()));
                    match d.branches.remove(&(repo, branch)) {
                        Some(_) => (204, Value::Null),
                        None => (404, json!({"message": "branch not found"})),
                    }
                }
                ("GET", ["pulls"]) => {
                    let all = r.path.contains("state=all");
                    let list: Vec<Value> = d
                        .pulls
                        .get(&repo)
                        .map(|v| {
                            v.iter()
                                .filter(|p| p.open || all)
                                .map(|p| {
                                    json!({"number": p.number, "html_url": format!("http://fake/{repo}/pulls/{}", p.number),
                                           "head": {"ref": p.head}, "base": {"ref": p.base}, "title": p.title})
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    (200, Value::Array(list))
                }
                ("POST", ["pulls"]) => {
                    if !authed {
                        return (401, json!({"message": "token required"}));
                    }
                    let body = r.json();
                    let head = body["head"].as_str().unwrap_or_default().to_string();
                    let base = body["base"].as_str().unwrap_or_default().to_string();
                    let pulls = d.pulls.entry(repo.clone()).or_default();
                    if pulls
                        .iter()
                        .any(|p| p.open && p.head == head && p.base == base)
                    {
                        return (409, json!({"message": "pull request already exists"}));
                    }
                    let number = pulls.len() as u64 + 1;
                    pulls.push(GiteaPull {
                        number,
                        head,
                        base,
                        title: body["title"].as_str().unwrap_or_default().to_string(),
                        open: true,
                        merged: false,
                        merge_commit_sha: None,
                    });
                    d.pulls_created += 1;
                    (
                        201,
                        json!({"number": number, "html_url": format!("http://fake/{repo}/pulls/{number}")}),
                    )
                }
                ("GET", ["pulls", n]) => {
                    let Some(p) = n
                        .parse::<u64>()
                        .ok()
                        .and_then(|n| d.pulls.get(&repo)?.iter().find(|p| p.number == n).cloned())
                    else {
                        return (404, json!({"message": "no such pull request"}));
                    };
                    let bare = d.remotes.get(&repo).cloned();
                    let head = bare.as_ref().and_then(|b| super::branch_head(b, &p.head));
                    let mergeable = match (&bare, &head) {
                        (Some(b), Some(h)) => {
                            let base = super::branch_head(b, &p.base).unwrap_or_default();
                            git_ok(b, &["merge-base", "--is-ancestor", &base, h])
                        }
                        _ => true,
                    };
                    (
                        200,
                        json!({"number": p.number, "state": if p.open { "open" } else { "closed" },
                               "merged": p.merged, "mergeable": mergeable && !p.merged,
                               "merge_commit_sha": p.merge_commit_sha, "head": {"sha": head}}),
                    )
                }
                ("POST", ["pulls", n, "merge"]) => {
                    if !authed {
                        return (401, json!({"message": "token required"}));
                    }
                    d.merge_calls += 1;
                    if let Some(status) = d.merge_script.pop_front() {
                        return (status, json!({"message": "scripted"}));
                    }
                    let n: u64 = n.parse().unwrap_or(0);
                    let body = r.json();
                    let style = body["Do"].as_str().unwrap_or("merge").to_string();
                    let want = body["head_commit_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    let bare = d.remotes.get(&repo).cloned();
                    let lies = d.merge_lies;
                    let Some(p) = d
                        .pulls
                        .get_mut(&repo)
                        .and_then(|v| v.iter_mut().find(|p| p.number == n))
                    else {
                        return (404, json!({"message": "no such pull request"}));
                    };
                    if p.merged {
                        return (405, json!({"message": "already merged"}));
                    }
                    let merged_sha = match (&bare, lies) {
                        (_, true) | (None, _) => want.clone(),
                        (Some(b), false) => {
                            let head = super::branch_head(b, &p.head).unwrap_or_default();
                            if !want.is_empty() && want != head {
                                return (409, json!({"message": "head commit changed"}));
                            }
                            let base = super::branch_head(b, &p.base).unwrap_or_default();
                            if !git_ok(b, &["merge-base", "--is-ancestor", &base, &head]) {
                                return (409, json!({"message": "merge conflict"}));
                            }
                            let new = match style.as_str() {
                                "rebase" => head.clone(),
                                "squash" => git_out(
                                    b,
                                    &[
                                        "commit-tree",
                                        &format!("{head}^{{tree}}"),
                                        "-p",
                                        &base,
                                        "-m",
                                        "squash",
                                    ],
                                ),
                                _ => git_out(
                                    b,
                                    &[
                                        "commit-tree",
                                        &format!("{head}^{{tree}}"),
                                        "-p",
                                        &base,
                                        "-p",
                                        &head,
                                        "-m",
                                        "merge",
                                    ],
                                ),
                            };
                            git_out(
                                b,
                                &["update-ref", &format!("refs/heads/{}", p.base), &new, &base],
                            );
                            new
                        }
                    };
                    p.merged = true;
                    p.open = false;
                    p.merge_commit_sha = Some(merged_sha);
                    d.merges += 1;
                    (200, Value::Null)
                }
                _ => (404, json!({"message": "no route"})),
            }
        };
        Gitea {
            server: Server::json(handler),
            data,
        }
    }

    pub fn add_branch(&self, repo: &str, branch: &str, sha: &str) {
        self.data
            .lock()
            .unwrap()
            .branches
            .insert((repo.to_string(), branch.to_string()), sha.to_string());
    }

    pub fn set_status(&self, repo: &str, sha: &str, context: &str, state: &str) {
        let mut d = self.data.lock().unwrap();
        let v = d
            .statuses
            .entry((repo.to_string(), sha.to_string()))
            .or_default();
        v.retain(|s| s.context != context);
        v.push(GiteaStatus {
            context: context.to_string(),
            state: state.to_string(),
            description: format!("{context} says {state}"),
        });
    }

    pub fn deletes(&self) -> Vec<(String, String)> {
        self.data.lock().unwrap().deletes.clone()
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    pub fn set_mode(&self, m: Mode) {
        self.server.set_mode(m)
    }
}

/// `git <args>` in a bare repo (the fake forge's own git work): success or not.
fn git_ok(bare: &std::path::Path, args: &[&str]) -> bool {
    std::process::Command::new("git")
        .arg("--git-dir")
        .arg(bare)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `git <args>` in a bare repo, its trimmed stdout (panics on failure: a broken fake).
fn git_out(bare: &std::path::Path, args: &[&str]) -> String {
    crate::support::git(bare, args)
}

// ------------------------------------------------------------------------------ Telegram

#[derive(Debug, Clone)]
pub struct Message {
    pub chat_id: String,
    pub text: String,
    pub parse_mode: Option<String>,
    pub disable_web_page_preview: Option<bool>,
}

pub struct Telegram {
    pub server: Server,
    pub messages: Arc<Mutex<Vec<Message>>>,
}

impl Telegram {
    /// A fake Bot API that knows one bot token.
    pub fn start(token: &str) -> Telegram {
        let messages = Arc::new(Mutex::new(Vec::new()));
        let m = messages.clone();
        let route = format!("/bot{token}/sendMessage");
        let handler = move |r: &Request| -> (u16, Value) {
            if r.method != "POST" || r.route() != route {
                return (
                    404,
                    json!({"ok": false, "error_code": 404, "description": "Not Found"}),
                );
            }
            let b = r.json();
            let chat_id = match &b["chat_id"] {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return (400, json!({"ok": false, "description": "chat_id required"})),
            };
            let mut m = m.lock().unwrap();
            m.push(Message {
                chat_id,
                text: b["text"].as_str().unwrap_or_default().to_string(),
                parse_mode: b["parse_mode"].as_str().map(str::to_string),
                disable_web_page_preview: b["disable_web_page_preview"].as_bool(),
            });
            (200, json!({"ok": true, "result": {"message_id": m.len()}}))
        };
        Telegram {
            server: Server::json(handler),
            messages,
        }
    }

    pub fn messages(&self) -> Vec<Message> {
        self.messages.lock().unwrap().clone()
    }

    pub fn url(&self) -> String {
        self.server.url()
    }
}
