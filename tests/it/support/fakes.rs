//! Small stateful fakes of Plane, Gitea and Telegram for integration tests: each an HTTP/1.1
//! server on `127.0.0.1:0` in the test process, holding what the real service would
//! (projects, states, issues, comments; repos, branches, statuses, pull requests; messages),
//! counting every write, and able to fail on demand: answer 503 to everything, or stop
//! listening so connections are refused (and come back on the same port).
//!
//! Use from any test file with `mod fakes;`. Point orch at `fake.url()` in the config.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

// ------------------------------------------------------------------------------ HTTP core

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path and query, as sent.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The path without its query.
    pub fn route(&self) -> &str {
        self.path.split('?').next().unwrap_or("")
    }
}

/// How the fake answers right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Up,
    /// Every request gets `503 Service Unavailable`.
    Unavailable,
    /// Nothing listens: connections are refused.
    Refusing,
}

type Handler = dyn Fn(&Request) -> (u16, Value) + Send + Sync;

/// The HTTP server under a fake.
pub struct Server {
    addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    stop: Arc<AtomicBool>,
    handler: Arc<Handler>,
    /// Every request that reached the handler (not the 503s), in order.
    pub log: Arc<Mutex<Vec<Request>>>,
    accept: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Server {
    fn start(handler: Arc<Handler>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a fake");
        let addr = listener.local_addr().unwrap();
        let s = Server {
            addr,
            mode: Arc::new(Mutex::new(Mode::Up)),
            stop: Arc::new(AtomicBool::new(false)),
            handler,
            log: Arc::new(Mutex::new(Vec::new())),
            accept: Mutex::new(None),
        };
        s.serve(listener);
        s
    }

    fn serve(&self, listener: TcpListener) {
        let stop = self.stop.clone();
        stop.store(false, Ordering::SeqCst);
        let mode = self.mode.clone();
        let handler = self.handler.clone();
        let log = self.log.clone();
        let t = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (mode, handler, log) = (mode.clone(), handler.clone(), log.clone());
                std::thread::spawn(move || {
                    let _ = handle(conn, &mode, &*handler, &log);
                });
            }
        });
        *self.accept.lock().unwrap() = Some(t);
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn mode(&self) -> Mode {
        *self.mode.lock().unwrap()
    }

    /// Switch how the fake answers; `Refusing` closes the port, leaving it reopens it.
    pub fn set_mode(&self, m: Mode) {
        let was = std::mem::replace(&mut *self.mode.lock().unwrap(), m);
        match (was == Mode::Refusing, m == Mode::Refusing) {
            (false, true) => {
                self.stop.store(true, Ordering::SeqCst);
                // Wake the accept loop so it sees the flag and drops the listener.
                let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2));
                if let Some(t) = self.accept.lock().unwrap().take() {
                    t.join().unwrap();
                }
            }
            (true, false) => {
                let mut tries = 0;
                let listener = loop {
                    match TcpListener::bind(self.addr) {
                        Ok(l) => break l,
                        Err(e) if tries < 100 => {
                            tries += 1;
                            let _ = e;
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        Err(e) => panic!("cannot listen on {} again: {e}", self.addr),
                    }
                };
                self.serve(listener);
            }
            _ => {}
        }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.mode() != Mode::Refusing {
            self.set_mode(Mode::Refusing);
        }
    }
}

fn handle(
    conn: TcpStream,
    mode: &Mutex<Mode>,
    handler: &Handler,
    log: &Mutex<Vec<Request>>,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(());
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let len = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; len.min(4 << 20)];
    reader.read_exact(&mut body)?;
    let req = Request {
        method,
        path,
        headers,
        body,
    };
    let (status, answer) = if *mode.lock().unwrap() == Mode::Unavailable {
        (503, json!({"error": "unavailable"}))
    } else {
        log.lock().unwrap().push(req.clone());
        handler(&req)
    };
    let body = if answer.is_null() {
        String::new()
    } else {
        answer.to_string()
    };
    let reason = match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        401 => "Unauthorized",
        404 => "Not Found",
        409 => "Conflict",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let mut out = conn;
    write!(
        out,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}

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
    pub id: String,
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
                        id: id.clone(),
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
            server: Server::start(Arc::new(handler)),
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
}

pub struct Gitea {
    pub server: Server,
    pub data: Arc<Mutex<GiteaData>>,
}

fn git_head(remote: &PathBuf, branch: &str) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(remote)
        .args([
            "rev-parse",
            "--verify",
            "-q",
            &format!("refs/heads/{branch}"),
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
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
                        None => match d.remotes.get(&repo).and_then(|p| git_head(p, &git_ref)) {
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
                    let list: Vec<Value> = d
                        .pulls
                        .get(&repo)
                        .map(|v| {
                            v.iter()
                                .filter(|p| p.open)
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
                    });
                    d.pulls_created += 1;
                    (
                        201,
                        json!({"number": number, "html_url": format!("http://fake/{repo}/pulls/{number}")}),
                    )
                }
                _ => (404, json!({"message": "no route"})),
            }
        };
        Gitea {
            server: Server::start(Arc::new(handler)),
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
            server: Server::start(Arc::new(handler)),
            messages,
        }
    }

    pub fn messages(&self) -> Vec<Message> {
        self.messages.lock().unwrap().clone()
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    pub fn set_mode(&self, m: Mode) {
        self.server.set_mode(m)
    }
}
