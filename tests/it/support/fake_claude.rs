//! A scripted Messages API on loopback for the real Claude Code CLI (`ANTHROPIC_BASE_URL`): the
//! CLI is the real program, only the model behind it is scripted. Each role has a script that
//! says what the "model" answers on each turn of a conversation: text, or tool calls (`Write`,
//! `Bash`, …) that the CLI itself executes, permission checks and hooks included, exactly as it
//! would for a real model. Faults can be queued for the next requests.
//!
//! What it follows:
//! - The Messages API (`POST /v1/messages`, streaming as server-sent events `message_start`,
//!   `content_block_start`/`_delta`/`_stop`, `message_delta`, `message_stop`, or one JSON
//!   message when `stream` is false), and its error shapes and statuses from "Claude API
//!   errors" (docs.anthropic.com/en/api/errors): `{"type":"error","error":{"type","message"}}`
//!   with 429 `rate_limit_error`, 500 `api_error`, 529 `overloaded_error`.
//! - A subscription's usage limit: 429 with the `anthropic-ratelimit-unified-*` headers the CLI
//!   reads (`-status: rejected`, `-reset: <unix>`, `-representative-claim: five_hour`); the CLI
//!   reports it as a limit only when it runs on a claude.ai login (`CLAUDE_CODE_OAUTH_TOKEN`).
//! - What the CLI sends, read off version 2.1.328 on this machine: the role prompt of
//!   `--system-prompt-file` among the `system` blocks, the working directory in a message of the
//!   conversation ("Primary working directory: …"), the job prompt (orch's `Work item: …`) in
//!   the first user message, the whole history on every request (so the turn is the number of
//!   assistant messages in it), and `tools` as the list the model is offered.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::fake_http::{Reply, Request, Server};

/// A fault the API answers with instead of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// 429 `rate_limit_error` (an API key's per-minute limit).
    RateLimited,
    /// 429 with a subscription's unified rate-limit headers: the 5-hour limit, reset at this
    /// unix time.
    SubscriptionLimit { resets_at: i64 },
    /// 529 `overloaded_error`.
    Overloaded,
    /// 500 `api_error`.
    ServerError,
    /// 400 `invalid_request_error` (a request the API refuses whatever the time).
    BadRequest,
    /// The request is accepted and never answered.
    Hang,
}

/// One content block of an answer.
#[derive(Debug, Clone)]
pub enum Block {
    Text(String),
    Tool { name: String, input: Value },
}

pub fn text(s: &str) -> Block {
    Block::Text(s.to_string())
}

pub fn tool(name: &str, input: Value) -> Block {
    Block::Tool {
        name: name.to_string(),
        input,
    }
}

/// `Write` of `content` at `path`, relative to the conversation's working directory.
pub fn write(c: &Conv, path: &str, content: &str) -> Block {
    tool(
        "Write",
        json!({"file_path": format!("{}/{path}", c.cwd), "content": content}),
    )
}

pub fn bash(command: &str) -> Block {
    tool(
        "Bash",
        json!({"command": command, "description": "run a command"}),
    )
}

/// What one request says about its conversation.
#[derive(Debug, Clone)]
pub struct Conv {
    pub cwd: String,
    pub work_item: String,
    /// Assistant messages so far: 0 on the first request of a conversation.
    pub turn: usize,
    /// The how-manieth conversation of this role this is (1-based), counted when its first
    /// turn is answered.
    pub round: usize,
    /// A number unique to this answer, for artifacts that must differ on every run.
    pub nonce: u64,
}

type Script = dyn Fn(&Conv) -> Vec<Block> + Send + Sync;

#[derive(Default)]
struct State {
    scripts: HashMap<String, Arc<Script>>,
    faults: VecDeque<Fault>,
    sticky: Option<Fault>,
    rounds: HashMap<String, usize>,
    /// Every message request's body, in order.
    bodies: Vec<Value>,
}

pub struct FakeClaude {
    pub server: Server,
    state: Arc<Mutex<State>>,
}

static NONCE: AtomicU64 = AtomicU64::new(1);

impl FakeClaude {
    /// The fake with every role's default script: a well-behaved agent that does its stage's
    /// work, and a reviewer that requests changes in its first round and approves after.
    pub fn start() -> FakeClaude {
        let state = Arc::new(Mutex::new(State::default()));
        let s = state.clone();
        let server = Server::start(move |r| answer(&s, r));
        let f = FakeClaude { server, state };
        for role in [
            "analyst",
            "architect",
            "developer",
            "reviewer",
            "tester",
            "deployer",
        ] {
            f.script(role, move |c| default_script(role, c));
        }
        f
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Replace a role's script.
    pub fn script(&self, role: &str, f: impl Fn(&Conv) -> Vec<Block> + Send + Sync + 'static) {
        self.state
            .lock()
            .unwrap()
            .scripts
            .insert(role.to_string(), Arc::new(f));
    }

    /// Answer the next `n` message requests with `fault`.
    pub fn fail_next(&self, n: usize, fault: Fault) {
        let mut s = self.state.lock().unwrap();
        s.faults.extend(std::iter::repeat_n(fault, n));
    }

    /// Answer every message request with `fault` until `None`.
    pub fn fail_always(&self, fault: Option<Fault>) {
        self.state.lock().unwrap().sticky = fault;
    }

    /// The bodies of every message request so far.
    pub fn bodies(&self) -> Vec<Value> {
        self.state.lock().unwrap().bodies.clone()
    }

    /// The tool names offered to the model in the requests of `role`'s conversations.
    pub fn offered_tools(&self, role: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .bodies()
            .iter()
            .filter(|b| role_of(b).as_deref() == Some(role))
            .flat_map(|b| {
                b["tools"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|t| t["name"].as_str().map(String::from))
            })
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// The role a request's system prompt names (`# Role: <role>`).
pub fn role_of(body: &Value) -> Option<String> {
    let system = match &body["system"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => return None,
    };
    let rest = &system[system.find("# Role: ")? + "# Role: ".len()..];
    Some(
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect(),
    )
}

/// The first `<marker><word>` in the request's messages.
fn find_after(messages: &str, marker: &str) -> Option<String> {
    let at = messages.find(marker)? + marker.len();
    Some(
        messages[at..]
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '"' && *c != '\\')
            .collect(),
    )
}

fn answer(state: &Mutex<State>, r: &Request) -> Reply {
    if r.method != "POST" || !r.route().starts_with("/v1/messages") {
        return Reply::json(
            404,
            &json!({"type": "error", "error": {"type": "not_found_error", "message": "not found"}}),
        );
    }
    let body = r.json();
    if r.route().ends_with("/count_tokens") {
        return Reply::json(200, &json!({"input_tokens": 100}));
    }
    let (fault, script, conv) = {
        let mut s = state.lock().unwrap();
        s.bodies.push(body.clone());
        let fault = s.faults.pop_front().or_else(|| s.sticky.clone());
        let messages = body["messages"].to_string();
        let role = role_of(&body).unwrap_or_default();
        let turn = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        if fault.is_none() && turn == 0 {
            *s.rounds.entry(role.clone()).or_default() += 1;
        }
        let round = s.rounds.get(&role).copied().unwrap_or(0);
        let conv = Conv {
            cwd: find_after(&messages, "Primary working directory: ").unwrap_or_default(),
            work_item: find_after(&messages, "Work item: ").unwrap_or_default(),
            turn,
            round,
            nonce: NONCE.fetch_add(1, Ordering::SeqCst),
        };
        (fault, s.scripts.get(&role).cloned(), conv)
    };
    if let Some(f) = fault {
        return fault_reply(&f);
    }
    let blocks = match script {
        Some(s) => s(&conv),
        None => vec![text("no script for this role")],
    };
    message_reply(&body, &blocks, conv.turn)
}

fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

fn fault_reply(f: &Fault) -> Reply {
    match f {
        Fault::RateLimited => Reply::json(
            429,
            &error_body(
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit",
            ),
        )
        .header("retry-after", "1"),
        Fault::SubscriptionLimit { resets_at } => {
            let at = resets_at.to_string();
            Reply::json(429, &error_body("rate_limit_error", "rate limited"))
                .header("anthropic-ratelimit-unified-status", "rejected")
                .header("anthropic-ratelimit-unified-reset", &at)
                .header(
                    "anthropic-ratelimit-unified-representative-claim",
                    "five_hour",
                )
                .header("anthropic-ratelimit-unified-5h-status", "rejected")
                .header("anthropic-ratelimit-unified-5h-reset", &at)
        }
        Fault::Overloaded => Reply::json(529, &error_body("overloaded_error", "Overloaded")),
        Fault::ServerError => Reply::json(500, &error_body("api_error", "Internal server error")),
        Fault::BadRequest => Reply::json(
            400,
            &error_body(
                "invalid_request_error",
                "tools.3.custom.name: String should match pattern",
            ),
        ),
        Fault::Hang => Reply::hang(),
    }
}

static TOOL_ID: AtomicU64 = AtomicU64::new(1);

fn message_reply(body: &Value, blocks: &[Block], turn: usize) -> Reply {
    let model = body["model"].as_str().unwrap_or("claude-test").to_string();
    let content: Vec<Value> = blocks
        .iter()
        .map(|b| match b {
            Block::Text(t) => json!({"type": "text", "text": t}),
            Block::Tool { name, input } => json!({
                "type": "tool_use",
                "id": format!("toolu_{:08}", TOOL_ID.fetch_add(1, Ordering::SeqCst)),
                "name": name,
                "input": input,
            }),
        })
        .collect();
    let stop = if content.iter().any(|c| c["type"] == "tool_use") {
        "tool_use"
    } else {
        "end_turn"
    };
    let usage = json!({
        "input_tokens": 100 + turn as i64,
        "output_tokens": 20,
        "cache_read_input_tokens": 50,
        "cache_creation_input_tokens": 7,
    });
    let id = format!("msg_{:08}", TOOL_ID.fetch_add(1, Ordering::SeqCst));
    let message = json!({
        "id": id, "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage,
    });
    if body["stream"] != true {
        return Reply::json(200, &message);
    }
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1,
                      "cache_read_input_tokens": 50, "cache_creation_input_tokens": 7},
        }}),
    )];
    for (i, c) in content.iter().enumerate() {
        let (start, delta) = if c["type"] == "text" {
            (
                json!({"type": "text", "text": ""}),
                json!({"type": "text_delta", "text": c["text"]}),
            )
        } else {
            (
                json!({"type": "tool_use", "id": c["id"], "name": c["name"], "input": {}}),
                json!({"type": "input_json_delta", "partial_json": c["input"].to_string()}),
            )
        };
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": i, "content_block": start}),
        ));
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": i, "delta": delta}),
        ));
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        ));
    }
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": 20}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    let sse: String = events
        .iter()
        .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
        .collect();
    Reply::event_stream(sse)
}

/// The artifact directory of the conversation's work item.
pub fn artifacts(c: &Conv) -> String {
    format!("docs/work-items/{}", c.work_item)
}

/// What a well-behaved agent of each role does: its stage's artifacts on the first turn, then
/// a closing sentence. The reviewer requests changes in its first round, then approves.
pub fn default_script(role: &str, c: &Conv) -> Vec<Block> {
    if c.turn > 0 {
        return vec![text(&format!("The {role} work is written."))];
    }
    let d = artifacts(c);
    let front = |stage: &str, extra: &str| {
        format!(
            "---\nwork_item: {wi}\nstage: {stage}\nauthor_agent: {role}\nrun_id: {n}\n{extra}---\n",
            wi = c.work_item,
            n = c.nonce
        )
    };
    match role {
        "analyst" => vec![
            text("I will write the analysis."),
            write(
                c,
                &format!("{d}/01-brd.md"),
                &format!("{}# BRD\n", front("analysis", "")),
            ),
            write(
                c,
                &format!("{d}/02-trz.md"),
                &format!("{}# TRZ\n", front("analysis", "")),
            ),
            write(
                c,
                &format!("{d}/03-acceptance-criteria.md"),
                &format!("{}# AC\n\n- AC-1: it works\n", front("analysis", "")),
            ),
            write(
                c,
                &format!("{d}/04-test-plan.yaml"),
                &format!(
                    "work_item: {}\nstage: analysis\ncases:\n  - id: AC-1\n    check: run it\n",
                    c.work_item
                ),
            ),
        ],
        "architect" => vec![write(
            c,
            &format!("{d}/06-adr/0001-design.md"),
            &format!("{}# ADR 1: keep it simple\n", front("architecture", "")),
        )],
        "developer" => vec![
            write(
                c,
                &format!("src/{}.txt", c.work_item.to_lowercase()),
                &format!("implementation, round {} ({})\n", c.round, c.nonce),
            ),
            write(
                c,
                &format!("{d}/10-dev-notes.md"),
                &format!("{}# Dev notes\n", front("development", "")),
            ),
            bash("git status --short"),
        ],
        "reviewer" => {
            let (verdict, findings) = if c.round <= 1 {
                ("REQUEST_CHANGES", "- P1: handle the empty cart\n")
            } else {
                ("APPROVED", "- none\n")
            };
            vec![
                bash("git diff --stat HEAD~1"),
                write(
                    c,
                    &format!("{d}/12-review.md"),
                    &format!(
                        "{}# Review\n\n## Findings\n{findings}",
                        front("review", &format!("verdict: {verdict}\n"))
                    ),
                ),
            ]
        }
        "tester" => vec![write(
            c,
            &format!("{d}/13-test-report.md"),
            &format!(
                "{}# Test report\n\n## Test output\nall green\n\n## Conclusion\nPASS\n",
                front("testing", "result: PASS\n")
            ),
        )],
        "deployer" => vec![write(
            c,
            &format!("{d}/14-deploy-log.md"),
            &format!(
                "{}# Deploy log\n",
                front("deploy", "deploy_status: SUCCESS\n")
            ),
        )],
        _ => vec![text("unknown role")],
    }
}
