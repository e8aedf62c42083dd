//! Outbound integrations end to end (SPEC §9): the real `orch` binary, the stub agent, and the
//! stateful fakes of Plane, Gitea and Telegram in `support::fakes`. A linked task's transitions
//! reach Plane in order and once; an outage never stalls the pipeline and its backlog is
//! delivered exactly once afterwards; a sandboxed process never writes outside its allowlist;
//! alerts are escaped and carry no secret; a cancel deletes the remote branch once, never main; a
//! lost CI webhook is recovered by polling the forge.

use std::time::Duration;

use crate::support::fakes::{Gitea, GiteaStatus, Mode, Plane, Telegram, state_id};
use crate::support::{Run, World, git, poll, stub_agent};
use serde_json::Value;

const PLANE_VAR: &str = "ORCH_TEST_PLANE_TOKEN";
const PLANE_TOKEN: &str = "plane-token-5f1c9a7e";
const GITEA_VAR: &str = "ORCH_TEST_GITEA_TOKEN";
const GITEA_TOKEN: &str = "gitea-token-b81d44e0";
const TG_VAR: &str = "ORCH_TEST_TG_TOKEN";
const TG_TOKEN: &str = "424242:tg-token-SECRET-0c9e";
const CHAT: &str = "-100777";
const PROJECT: &str = "proj-shop";
const LAB_PROJECT: &str = "proj-lab";

const DEADLINE: Duration = Duration::from_secs(90);

/// Every hop of a task walked from `created` to `done` in a repo without staging or deploy
/// contracts, and the Plane state each one mirrors.
const HOPS: [(&str, &str, &str); 8] = [
    ("created", "analysis", "Analysis"),
    ("analysis", "architecture", "Architecture"),
    ("architecture", "development", "Development"),
    ("development", "review", "Code-Review"),
    ("review", "testing", "Testing"),
    ("testing", "deploy-staging", "Awaiting Deploy"),
    ("deploy-staging", "deploy", "Deploying"),
    ("deploy", "done", "Done"),
];

/// What a world's config says beyond its `shop` repo.
#[derive(Default)]
struct Setup<'a> {
    plane: Option<&'a Plane>,
    gitea: Option<&'a Gitea>,
    telegram: Option<&'a Telegram>,
    /// Extra YAML lines of the `shop` repo entry.
    repo_extra: &'a str,
    /// A second repo `lab` (prefix `LAB`, Plane project `LAB_PROJECT`).
    lab: bool,
    allowed_projects: &'a [&'a str],
    max_developer_retries: u32,
}

/// A temp world driven by the stub agent. Dropping it kills every process it started (see
/// [`World`]).
struct Env {
    w: World,
}

impl std::ops::Deref for Env {
    type Target = World;
    fn deref(&self) -> &World {
        &self.w
    }
}

impl Env {
    fn new(s: Setup<'_>) -> Env {
        let e = Env { w: World::new() };
        let mut repo_extra = String::new();
        for l in s.repo_extra.lines() {
            repo_extra.push_str(&format!("    {l}\n"));
        }
        let mut yaml = format!(
            "state_dir: {state:?}\n\
max_concurrency: 2\n\
max_developer_retries: {mdr}\n\
agent:\n  argv: [{stub:?}, \"--print\"]\n  inactivity_timeout_s: 120\n  max_attempts: 3\n\
scheduler:\n  reconcile_grace_s: 1\n  retry_backoff_s: 1\n\
repos:\n  - name: shop\n    remote: {remote:?}\n    prefix: SHOP\n    default_labels: [auto-approve]\n    plane_project: {PROJECT}\n{repo_extra}",
            state = e.state_dir().display().to_string(),
            mdr = s.max_developer_retries,
            stub = stub_agent().display().to_string(),
            remote = e.remote.display().to_string(),
        );
        if s.lab {
            yaml.push_str(&format!(
                "  - name: lab\n    remote: {remote:?}\n    prefix: LAB\n    default_labels: [auto-approve]\n    plane_project: {LAB_PROJECT}\n",
                remote = e.remote.display().to_string(),
            ));
        }
        if let Some(p) = s.plane {
            yaml.push_str(&format!(
                "tracker: {{kind: plane, base_url: {:?}, workspace: team, token_env: {PLANE_VAR}}}\n",
                p.url()
            ));
        }
        if let Some(g) = s.gitea {
            yaml.push_str(&format!(
                "forge: {{kind: gitea, base_url: {:?}, token_env: {GITEA_VAR}}}\n",
                g.url()
            ));
        }
        if let Some(t) = s.telegram {
            yaml.push_str(&format!(
                "chat: {{kind: telegram, base_url: {:?}, token_env: {TG_VAR}, chat_id: {CHAT:?}}}\n",
                t.url()
            ));
        }
        yaml.push_str(&format!(
            "sandbox: {{allowed_projects: [{}]}}\n",
            s.allowed_projects.join(", ")
        ));
        std::fs::write(&e.config, yaml).unwrap();
        e
    }

    /// `orch <args>` with the service tokens in the environment, unsandboxed unless `env` says
    /// otherwise.
    fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut c = self.stub_cmd(args);
        c.env_remove("ORCH_SANDBOX")
            .env(PLANE_VAR, PLANE_TOKEN)
            .env(GITEA_VAR, GITEA_TOKEN)
            .env(TG_VAR, TG_TOKEN)
            .envs(env.iter().copied());
        Run::of(&mut c)
    }

    fn run(&self, args: &[&str], code: i32) -> Run {
        let r = self.run_with(args, &[]);
        assert_eq!(r.code, code, "orch {args:?}:\n{r:?}");
        r
    }

    fn add_task(&self, repo: &str, title: &str) -> String {
        let r = self.run(
            &["task", "add", "--repo", repo, "--title", title, "--json"],
            0,
        );
        r.json()["work_item"].as_str().unwrap().to_string()
    }

    /// Link every task created from now on to the Plane issue `issue-<work item>` in the
    /// transaction that creates it, as a task created from a Plane webhook is.
    fn link_new_tasks(&self) {
        // A writing command creates the database (the read commands never do).
        self.run(&["tick"], 0);
        let c = rusqlite::Connection::open(self.db_path()).unwrap();
        c.execute_batch(
            "CREATE TRIGGER link_tracker AFTER INSERT ON tasks BEGIN \
             UPDATE tasks SET tracker_ref = 'issue-' || NEW.base_work_item WHERE id = NEW.id; END;",
        )
        .unwrap();
    }

    fn outbox(&self, args: &[&str]) -> Vec<Value> {
        let mut a = vec!["outbox", "--json"];
        a.extend_from_slice(args);
        let v = self.run(&a, 0).json();
        assert_eq!(v["schema_version"], 1, "{v:#}");
        v["items"].as_array().unwrap().clone()
    }

    fn pending(&self) -> usize {
        self.sql("SELECT count(*) FROM outbox WHERE status = 'pending'")
            .parse()
            .unwrap()
    }

    /// As if the backoff had passed: every pending row is due now.
    fn make_due(&self) {
        self.sql("UPDATE outbox SET next_attempt_at = 0 WHERE status = 'pending' RETURNING id");
    }

    fn tick(&self) -> Run {
        let r = self.run_with(&["tick"], &[]);
        assert_eq!(r.code, 0, "orch tick:\n{r:?}");
        r
    }

    /// Tick until `pred` holds; every tick's output is returned.
    #[track_caller]
    fn tick_until(&self, what: &str, mut pred: impl FnMut(&Env) -> bool) -> Vec<Run> {
        let mut runs = Vec::new();
        let reached = poll(DEADLINE, Duration::from_millis(200), || {
            runs.push(self.tick());
            pred(self)
        });
        if !reached {
            let show = self.sql("SELECT work_item, stage, coalesce(blocked_reason, '') FROM tasks");
            let outbox =
                self.sql("SELECT id, kind, status, attempts, coalesce(last_error, '') FROM outbox");
            panic!(
                "{what}: not reached in {DEADLINE:?}\ntasks:\n{show}\noutbox:\n{outbox}\nlast tick: {:?}",
                runs.last()
            );
        }
        runs
    }

    fn stage_of(&self, wi: &str) -> String {
        self.sql(&format!(
            "SELECT stage FROM tasks WHERE base_work_item = '{wi}' ORDER BY id DESC LIMIT 1"
        ))
    }
}

fn assert_no_secret(texts: &[&str]) {
    for t in texts {
        for secret in [PLANE_TOKEN, GITEA_TOKEN, TG_TOKEN, "tg-token-SECRET"] {
            assert!(!t.contains(secret), "a token leaked: {t}");
        }
    }
}

fn plane() -> Plane {
    let p = Plane::start("team", PLANE_TOKEN);
    p.add_project(PROJECT);
    p.add_project(LAB_PROJECT);
    p
}

#[test]
fn plane_mirrors_every_transition_of_a_linked_task_once_and_in_order() {
    let plane = plane();
    plane.add_issue(PROJECT, "issue-SHOP-1", "To Analyse");
    let w = Env::new(Setup {
        plane: Some(&plane),
        ..Setup::default()
    });
    w.link_new_tasks();
    let wi = w.add_task("shop", "Add a health endpoint");
    assert_eq!(wi, "SHOP-1");
    let mut runs = w.tick_until("done and delivered", |w| {
        w.stage_of("SHOP-1") == "done" && w.pending() == 0
    });
    runs.extend((0..2).map(|_| w.tick()));

    let issue = plane.issue(PROJECT, "issue-SHOP-1");
    let want: Vec<&str> = HOPS.iter().map(|h| h.2).collect();
    assert_eq!(issue.moves, want, "the state of every hop, in order, once");
    assert_eq!(issue.state, state_id("Done"));
    assert_eq!(
        issue.comments.len(),
        HOPS.len(),
        "one comment per transition: {:#?}",
        issue.comments
    );
    for (c, (from, to, _)) in issue.comments.iter().zip(HOPS) {
        assert!(
            c.html.contains(&format!(
                "<code>{from}</code> → <code>{to}</code> (advanced)"
            )),
            "{from} → {to}: {}",
            c.html
        );
    }
    // The comment that ends an agent's stage quotes its run (scripts/stub-agent's numbers).
    let dev = &issue.comments[3].html;
    for want in [
        "role: developer",
        "by: supervisor",
        "tokens 4200 in / 1800 out",
        "cost $0.0614",
        "duration ",
    ] {
        assert!(dev.contains(want), "{want}: {dev}");
    }
    let mut ids: Vec<_> = issue
        .comments
        .iter()
        .map(|c| c.external_id.clone())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(
        ids.len(),
        HOPS.len(),
        "every comment has its own idempotency key"
    );
    assert_eq!(plane.data.lock().unwrap().duplicate_comments_refused, 0);
    // Every request carried the key; none had it anywhere else.
    for r in plane.server.requests() {
        assert_eq!(r.header("x-api-key"), Some(PLANE_TOKEN));
        assert!(!r.path.contains(PLANE_TOKEN));
    }
    // Nothing left, nothing failed; no token in any output or payload.
    assert!(w.outbox(&[]).is_empty());
    let payloads = w.sql("SELECT group_concat(payload, ' ') FROM outbox");
    let outs: Vec<String> = runs
        .iter()
        .map(|r| format!("{}{}", r.stdout, r.stderr))
        .collect();
    let mut all: Vec<&str> = outs.iter().map(String::as_str).collect();
    all.push(&payloads);
    assert_no_secret(&all);
}

#[test]
fn plane_down_for_the_whole_run_stalls_nothing_and_the_backlog_is_delivered_exactly_once() {
    let plane = plane();
    plane.add_issue(PROJECT, "issue-SHOP-1", "To Analyse");
    plane.set_mode(Mode::Refusing);
    let w = Env::new(Setup {
        plane: Some(&plane),
        ..Setup::default()
    });
    w.link_new_tasks();
    let wi = w.add_task("shop", "Survive an outage");
    w.tick_until("done while plane is down", |w| w.stage_of(&wi) == "done");

    // Everything is still queued: a state and a comment per hop, in order, the first tried.
    let items = w.outbox(&[]);
    assert_eq!(items.len(), 2 * HOPS.len(), "{items:#?}");
    assert!(items.iter().all(|i| i["status"] == "pending"), "{items:#?}");
    assert!(items[0]["attempts"].as_u64().unwrap() >= 1, "{items:#?}");
    let err = items[0]["last_error"].as_str().unwrap_or_default();
    assert!(err.contains("unreachable"), "{err}");
    assert_eq!(items[0]["kind"], "plane.state");
    assert_eq!(items[0]["target"], format!("plane:{PROJECT}"));
    assert!(items.iter().all(|i| i["next_attempt_at"].is_string()));
    assert_eq!(w.outbox(&["--failed"]).len(), 0);
    assert_eq!(plane.writes(), 0);

    // Answering 503 counts as an attempt and backs off; nothing is written.
    plane.set_mode(Mode::Unavailable);
    w.make_due();
    w.tick();
    let head = &w.outbox(&[])[0];
    assert!(
        head["last_error"].as_str().unwrap().contains("HTTP 503"),
        "{head:#}"
    );
    assert_eq!(plane.writes(), 0);

    // Back up. While the first row still backs off, the rows behind it wait: sending them
    // first would leave the issue in an older state once the first one goes out.
    plane.set_mode(Mode::Up);
    w.sql(
        "UPDATE outbox SET next_attempt_at = 0 WHERE status = 'pending' \
         AND id > (SELECT min(id) FROM outbox) RETURNING id",
    );
    w.tick();
    assert_eq!(plane.writes(), 0, "{:#?}", w.outbox(&[]));
    // The backoff over, the next ticks deliver the whole backlog, in order, each once.
    w.make_due();
    w.tick_until("the backlog is delivered", |w| w.pending() == 0);
    for _ in 0..2 {
        w.tick();
    }
    let issue = plane.issue(PROJECT, "issue-SHOP-1");
    let want: Vec<&str> = HOPS.iter().map(|h| h.2).collect();
    assert_eq!(issue.moves, want);
    assert_eq!(issue.comments.len(), HOPS.len());
    assert_eq!(plane.data.lock().unwrap().comment_posts, HOPS.len());

    // A drainer that died after Plane took a comment but before marking it done: the retry is
    // recognised by its idempotency key and posts nothing new.
    w.sql(
        "UPDATE outbox SET status = 'pending', done_at = NULL, next_attempt_at = 0 \
         WHERE id = (SELECT min(id) FROM outbox WHERE kind = 'plane.comment') RETURNING id",
    );
    w.tick();
    assert_eq!(w.pending(), 0);
    assert_eq!(
        plane.issue(PROJECT, "issue-SHOP-1").comments.len(),
        HOPS.len()
    );
    assert_eq!(plane.data.lock().unwrap().duplicate_comments_refused, 1);
    let result =
        w.sql("SELECT result FROM outbox WHERE kind = 'plane.comment' ORDER BY id LIMIT 1");
    assert!(result.contains("already posted"), "{result}");
}

#[test]
fn a_sandboxed_tick_writes_only_to_allowlisted_projects() {
    let plane = plane();
    plane.add_issue(PROJECT, "issue-SHOP-1", "To Analyse");
    plane.add_issue(LAB_PROJECT, "issue-LAB-1", "To Analyse");
    let w = Env::new(Setup {
        plane: Some(&plane),
        lab: true,
        allowed_projects: &[LAB_PROJECT],
        ..Setup::default()
    });
    w.link_new_tasks();
    // Queue a state and a comment for each project while Plane is away, and hold the repos so
    // no agent runs.
    plane.set_mode(Mode::Refusing);
    let shop = w.add_task("shop", "Touch production");
    let lab = w.add_task("lab", "Touch the sandbox");
    for repo in ["shop", "lab"] {
        w.run(&["freeze", repo, "--reason", "test"], 0);
    }
    plane.set_mode(Mode::Up);
    w.make_due();

    let r = w.run_with(&["tick"], &[("ORCH_SANDBOX", "1")]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("SANDBOX REFUSED") && r.stderr.contains(&format!("plane:{PROJECT}")),
        "the refusal is logged loudly with its target: {r:?}"
    );
    assert_no_secret(&[&r.stdout, &r.stderr]);
    // The fake saw nothing of the production project, and the sandbox project's writes.
    assert!(
        plane
            .server
            .requests()
            .iter()
            .all(|q| !q.path.contains(PROJECT)),
        "{:#?}",
        plane.server.requests()
    );
    assert_eq!(
        plane.issue(PROJECT, "issue-SHOP-1").moves,
        Vec::<String>::new()
    );
    let l = plane.issue(LAB_PROJECT, "issue-LAB-1");
    assert_eq!(l.moves, ["Analysis"]);
    assert_eq!(l.comments.len(), 1);
    // The refused rows wait, saying why; nothing was spent on them.
    let items = w.outbox(&[]);
    assert_eq!(items.len(), 2, "the state and the comment: {items:#?}");
    for i in &items {
        assert_eq!(i["target"], format!("plane:{PROJECT}"));
        assert_eq!(i["status"], "pending");
    }
    assert!(
        items[0]["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("sandbox.allowed_projects"),
        "{items:#?}"
    );
    // Another sandboxed pass changes nothing; an unsandboxed one delivers.
    let r = w.run_with(&["tick"], &[("ORCH_SANDBOX", "1")]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(plane.issue(PROJECT, "issue-SHOP-1").moves.is_empty());
    w.tick();
    assert_eq!(plane.issue(PROJECT, "issue-SHOP-1").moves, ["Analysis"]);
    assert_eq!(w.pending(), 0);
    let _ = (shop, lab);
}

#[test]
fn a_blocked_task_sends_one_escaped_telegram_alert_and_no_token_anywhere() {
    let tg = Telegram::start(TG_TOKEN);
    let w = Env::new(Setup {
        telegram: Some(&tg),
        max_developer_retries: 0,
        ..Setup::default()
    });
    let title = "Fix <b>& \"quotes\"";
    let wi = w.add_task("shop", title);
    let mut outs = Vec::new();
    w.push_analysis(&wi);
    outs.push(w.run(&["approve", &wi], 0));
    w.push_adr(&wi);
    outs.push(w.run(&["advance", &wi], 0));
    w.push_code(&wi, "change 1");
    outs.push(w.run(&["advance", &wi], 0));
    w.push_review(&wi, "REQUEST_CHANGES", "- P0: wrong", 1);
    // The command that blocks the task sends the alert itself; even full tracing of it shows
    // no token.
    let r = w.run_with(&["advance", &wi, "--json"], &[("ORCH_LOG", "trace")]);
    assert_eq!(r.code, 5, "{r:?}");
    assert_eq!(r.json()["outcome"], "blocked");
    assert!(r.stderr.contains("alert: task blocked"), "{r:?}");
    outs.push(r);
    for _ in 0..2 {
        outs.push(w.tick());
    }

    let msgs = tg.messages();
    assert_eq!(msgs.len(), 1, "one alert: {msgs:#?}");
    let m = &msgs[0];
    assert_eq!(m.chat_id, CHAT);
    assert_eq!(m.parse_mode.as_deref(), Some("HTML"));
    assert_eq!(m.disable_web_page_preview, Some(true));
    assert!(m.text.contains(&format!("<b>{wi}</b>")), "{}", m.text);
    assert!(
        m.text.contains("Fix &lt;b&gt;&amp; &quot;quotes&quot;"),
        "the title is escaped: {}",
        m.text
    );
    assert!(!m.text.contains("<b>&"), "{}", m.text);
    assert!(m.text.contains("blocked"), "{}", m.text);
    let row = w.sql("SELECT status || '|' || target || '|' || payload FROM outbox");
    assert!(row.starts_with(&format!("done|telegram:{CHAT}|")), "{row}");
    let texts: Vec<String> = outs
        .iter()
        .map(|r| format!("{}{}", r.stdout, r.stderr))
        .collect();
    let mut all: Vec<&str> = texts.iter().map(String::as_str).collect();
    all.push(&row);
    let logs = std::fs::read_dir(w.state_dir().join("logs"))
        .map(|d| {
            d.flatten()
                .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    all.extend(logs.iter().map(String::as_str));
    assert_no_secret(&all);
}

#[test]
fn alerts_without_a_chat_block_only_go_to_the_log() {
    let w = Env::new(Setup {
        max_developer_retries: 0,
        ..Setup::default()
    });
    let wi = w.add_task("shop", "No chat here");
    w.push_analysis(&wi);
    w.run(&["approve", &wi], 0);
    w.push_adr(&wi);
    w.run(&["advance", &wi], 0);
    w.push_code(&wi, "c");
    w.run(&["advance", &wi], 0);
    w.push_review(&wi, "REQUEST_CHANGES", "- P0: wrong", 1);
    let r = w.run(&["advance", &wi], 5);
    assert!(r.stderr.contains("alert: task blocked"), "{r:?}");
    assert_eq!(w.sql("SELECT count(*) FROM outbox"), "0");
}

#[test]
fn cancel_deletes_the_remote_branch_once_through_the_forge_never_main() {
    let gitea = Gitea::start(GITEA_TOKEN);
    let w = Env::new(Setup {
        gitea: Some(&gitea),
        repo_extra: "forge_repo: team/shop",
        ..Setup::default()
    });
    let wi = w.add_task("shop", "Doomed work");
    let branch = w.branch_of(&wi);
    gitea.add_branch(
        "team/shop",
        "main",
        "1111111111111111111111111111111111111111",
    );
    gitea.add_branch(
        "team/shop",
        &branch,
        "2222222222222222222222222222222222222222",
    );

    let r = w.run(&["cancel", &wi], 0);
    assert_eq!(gitea.deletes(), [("team/shop".to_string(), branch.clone())]);
    for _ in 0..2 {
        w.tick();
    }
    assert_eq!(
        gitea.deletes().len(),
        1,
        "exactly once: {:?}",
        gitea.deletes()
    );
    assert!(
        gitea
            .data
            .lock()
            .unwrap()
            .branches
            .contains_key(&("team/shop".into(), "main".into()))
    );
    for q in gitea.server.requests() {
        assert_eq!(
            q.header("authorization"),
            Some(format!("token {GITEA_TOKEN}").as_str())
        );
    }
    let row = w.sql("SELECT kind, target, status, result FROM outbox");
    assert_eq!(
        row,
        format!("forge.delete_branch|gitea:team/shop|done|deleted branch `{branch}`")
    );
    assert_no_secret(&[&r.stdout, &r.stderr, &row]);
}

/// Cancel deleted the branch by name, later, through the outbox: a task started again with the
/// same id and title gets the same branch, which the delayed delete then removed.
#[test]
fn a_delayed_branch_delete_spares_a_task_started_again_on_that_branch() {
    let gitea = Gitea::start(GITEA_TOKEN);
    let w = Env::new(Setup {
        gitea: Some(&gitea),
        repo_extra: "forge_repo: team/shop",
        ..Setup::default()
    });
    let wi = w.add_task("shop", "Same title");
    let branch = w.branch_of(&wi);
    gitea.add_branch(
        "team/shop",
        &branch,
        "2222222222222222222222222222222222222222",
    );
    gitea.set_mode(Mode::Unavailable);
    w.run(&["cancel", &wi], 0);
    assert_eq!(gitea.deletes(), Vec::<(String, String)>::new());
    // Started again: the same id and title give the same branch, pushed anew.
    let again = w.run(
        &[
            "task",
            "add",
            "--repo",
            "shop",
            "--title",
            "Same title",
            "--work-item",
            &wi,
            "--json",
        ],
        0,
    );
    assert_eq!(again.json()["branch"], branch.as_str());
    gitea.add_branch(
        "team/shop",
        &branch,
        "3333333333333333333333333333333333333333",
    );
    gitea.set_mode(Mode::Up);
    w.sql("UPDATE outbox SET next_attempt_at = 0 WHERE status = 'pending'");
    w.tick();
    assert_eq!(gitea.deletes(), Vec::<(String, String)>::new());
    let row = w.sql("SELECT status, result FROM outbox WHERE kind = 'forge.delete_branch'");
    assert!(row.starts_with("done|") && row.contains("kept"), "{row}");
}

#[test]
fn cancel_deletes_the_remote_branch_with_git_when_there_is_no_forge() {
    let w = Env::new(Setup::default());
    let main_before = git(&w.remote, &["rev-parse", "refs/heads/main"]);
    let wi = w.add_task("shop", "Pushed then stopped");
    w.push_analysis(&wi);
    let branch = w.branch_of(&wi);
    let other_branch_of = |o: &str| w.branch_of(o);
    git(
        &w.remote,
        &["rev-parse", "--verify", &format!("refs/heads/{branch}")],
    );
    // A second task whose branch never reached the remote.
    let other = w.add_task("shop", "Never pushed");
    let other_branch = other_branch_of(&other);

    w.run(&["cancel", &wi], 0);
    w.run(&["cancel", &other], 0);
    w.tick();
    let heads = git(
        &w.remote,
        &["for-each-ref", "--format=%(refname)", "refs/heads"],
    );
    assert_eq!(heads, "refs/heads/main", "only main is left");
    assert_eq!(
        git(&w.remote, &["rev-parse", "refs/heads/main"]),
        main_before
    );
    let rows = w.sql("SELECT kind, target, status, result FROM outbox ORDER BY id");
    let rows: Vec<&str> = rows.lines().collect();
    assert_eq!(
        rows[0],
        format!("git.delete_branch|git:shop|done|deleted branch `{branch}`")
    );
    assert_eq!(
        rows[1],
        format!("git.delete_branch|git:shop|done|branch `{other_branch}` was already gone")
    );
}

#[test]
fn a_lost_ci_webhook_is_recovered_by_polling_the_forge() {
    let gitea = Gitea::start(GITEA_TOKEN);
    let w = Env::new(Setup {
        gitea: Some(&gitea),
        repo_extra: "forge_repo: team/shop\nci: {mode: status}",
        ..Setup::default()
    });
    {
        let mut d = gitea.data.lock().unwrap();
        d.remotes.insert("team/shop".into(), w.remote.clone());
        d.default_status = Some(GiteaStatus {
            context: "ci/build".into(),
            state: "success".into(),
            description: "built".into(),
        });
    }
    let wi = w.add_task("shop", "Needs CI");
    w.tick_until("done through the polled status", |w| {
        w.stage_of(&wi) == "done"
    });

    let hop = w.sql(
        "SELECT t.actor FROM transitions t JOIN tasks k ON k.id = t.task_id \
         WHERE t.from_stage = 'development' AND t.to_stage = 'review'",
    );
    // No webhook ever came: the status can only have come from the tick's poll. Whoever read it
    // first moved the task on — the reconciler, or the developer's supervisor when the poll
    // landed between its job finishing and its own advance.
    assert!(
        hop == "reconciler" || hop == "supervisor",
        "development was left by `{hop}`"
    );
    let ci = w.sql("SELECT sha, context, state FROM ci_status");
    assert!(ci.lines().any(|l| l.ends_with("|ci/build|success")), "{ci}");
    // At most one poll per task per minute.
    let reads = gitea.data.lock().unwrap().status_reads;
    assert!((1..=2).contains(&reads), "{reads} polls");
}

#[test]
fn missing_states_fall_back_to_the_group_and_a_done_issue_never_moves_back() {
    let plane = Plane::start("team", PLANE_TOKEN);
    plane.add_project(PROJECT);
    plane.add_project_with(
        LAB_PROJECT,
        &[
            ("Backlog", "backlog"),
            ("Todo", "unstarted"),
            ("In Progress", "started"),
            ("Shipped", "completed"),
            ("Dropped", "cancelled"),
        ],
    );
    // Someone already closed the shop issue by hand.
    plane.add_issue(PROJECT, "issue-SHOP-1", "Done");
    plane.add_issue(LAB_PROJECT, "issue-LAB-1", "Todo");
    let w = Env::new(Setup {
        plane: Some(&plane),
        lab: true,
        ..Setup::default()
    });
    w.link_new_tasks();
    let shop = w.add_task("shop", "Already closed upstream");
    let lab = w.add_task("lab", "Plain workflow");
    w.run(&["cancel", &lab], 0);

    let s = plane.issue(PROJECT, "issue-SHOP-1");
    assert!(s.moves.is_empty(), "{s:#?}");
    assert_eq!(s.state, state_id("Done"));
    assert_eq!(s.comments.len(), 1, "the comment still goes out");
    let result = w
        .sql("SELECT result FROM outbox WHERE kind = 'plane.state' AND target = 'plane:proj-shop'");
    assert!(result.contains("never moved backwards"), "{result}");

    let l = plane.issue(LAB_PROJECT, "issue-LAB-1");
    assert_eq!(
        l.moves,
        ["In Progress", "Dropped"],
        "base states of the groups"
    );
    assert_eq!(l.comments.len(), 2);
    assert!(
        l.comments[1].html.contains("(cancelled)"),
        "{:#?}",
        l.comments
    );
    let results = w.sql(
        "SELECT result FROM outbox WHERE kind = 'plane.state' AND target = 'plane:proj-lab' ORDER BY id",
    );
    assert!(
        results.contains("the project has no `Analysis`"),
        "{results}"
    );
    assert_eq!(w.pending(), 0);
    let _ = shop;
}

#[test]
fn the_gitea_client_speaks_the_fakes_api() {
    use orch::ext::gitea::{Deleted, ForgeRepo, Gitea as Client};
    use orch::ext::http::{CallError, Http};
    let fake = Gitea::start(GITEA_TOKEN);
    let sha = "3333333333333333333333333333333333333333";
    fake.add_branch("team/shop", "feature/SHOP-9-x", sha);
    fake.add_branch("team/shop", "main", sha);
    fake.set_status("team/shop", sha, "ci/build", "success");
    fake.set_status("team/shop", sha, "ci/lint", "failure");
    let http = Http::new(Duration::from_secs(5));
    let g = Client::new(&http, &fake.url(), Some(GITEA_TOKEN));
    let repo = ForgeRepo::parse("team/shop").unwrap();

    let s = g.combined_status(&repo, "feature/SHOP-9-x").unwrap();
    assert_eq!((s.sha.as_str(), s.state.as_str()), (sha, "failure"));
    let mut contexts: Vec<_> = s
        .statuses
        .iter()
        .map(|x| (x.context.as_str(), x.state.as_str()))
        .collect();
    contexts.sort();
    assert_eq!(contexts, [("ci/build", "success"), ("ci/lint", "failure")]);

    let pr = g
        .find_or_create_pr(&repo, "feature/SHOP-9-x", "main", "SHOP-9: x", "body")
        .unwrap();
    assert!(pr.created, "{pr:?}");
    let again = g
        .find_or_create_pr(&repo, "feature/SHOP-9-x", "main", "SHOP-9: x", "body")
        .unwrap();
    assert_eq!((again.number, again.created), (pr.number, false));
    assert_eq!(fake.data.lock().unwrap().pulls_created, 1);

    for main in ["main", "master", "trunk"] {
        let e = g.delete_branch(&repo, main, "trunk", None).unwrap_err();
        assert!(matches!(e, CallError::Permanent(_)), "{e}");
    }
    assert!(
        fake.deletes().is_empty(),
        "nothing was sent for a main branch"
    );
    assert_eq!(
        g.delete_branch(&repo, "feature/SHOP-9-x", "main", None)
            .unwrap(),
        Deleted::Deleted
    );
    assert_eq!(
        g.delete_branch(&repo, "feature/SHOP-9-x", "main", None)
            .unwrap(),
        Deleted::AlreadyGone
    );

    // A forge that refuses connections is a transient, unreachable failure.
    fake.set_mode(Mode::Refusing);
    let e = g.combined_status(&repo, "main").unwrap_err();
    assert!(
        matches!(
            e,
            CallError::Transient {
                unreachable: true,
                ..
            }
        ),
        "{e:?}"
    );
}
