//! `orch queue` and `orch why`: every queued job says why it waits (SPEC §4.2), the serial gate,
//! pause, freeze and dependencies as the operator sees them (§3.7), and the 24-hour counts (§10).

use crate::support::{World, now};
use serde_json::Value;

/// The one queued job of a work item.
fn job<'a>(q: &'a Value, wi: &str) -> &'a Value {
    let jobs: Vec<&Value> = q["queued"]
        .as_array()
        .unwrap_or_else(|| panic!("no `queued` array: {q:#}"))
        .iter()
        .filter(|j| j["work_item"] == wi)
        .collect();
    assert_eq!(jobs.len(), 1, "expected one queued job of {wi}: {q:#}");
    jobs[0]
}

/// `(reason, detail)` of the job of `wi`, or `None` when it is claimable.
fn blocked_by(q: &Value, wi: &str) -> Option<(String, String)> {
    let b = &job(q, wi)["blocked_by"];
    if b.is_null() {
        return None;
    }
    Some((
        b["reason"].as_str().unwrap().to_string(),
        b["detail"].as_str().unwrap().to_string(),
    ))
}

fn reason(q: &Value, wi: &str) -> Option<String> {
    blocked_by(q, wi).map(|(r, _)| r)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn queue_json_has_the_documented_shape() {
    let w = World::new();
    w.add("First", &[]);
    let q = w.queue();
    for key in [
        "schema_version",
        "generated_at",
        "max_concurrency",
        "counts",
        "running",
        "queued",
        "tasks",
        "serial_gate",
        "leases",
        "freezes",
    ] {
        assert!(q.get(key).is_some(), "missing `{key}`: {q:#}");
    }
    assert_eq!(q["max_concurrency"], 2);
    for key in ["queued", "running", "done", "failed", "cancelled"] {
        assert!(q["counts"][key].is_u64(), "counts.{key}: {q:#}");
    }
    assert_eq!(q["counts"]["queued"], 1);
    assert_eq!(q["counts"]["running"], 0);
    let j = job(&q, "SHOP-1");
    for key in [
        "job_id",
        "work_item",
        "role",
        "repo",
        "available_at",
        "blocked_by",
    ] {
        assert!(j.get(key).is_some(), "queued job lacks `{key}`: {j:#}");
    }
    assert_eq!(j["role"], "analyst");
    assert_eq!(j["repo"], "shop");
    assert!(j["blocked_by"].is_null(), "{j:#}");
    let g = &q["serial_gate"]["shop"];
    for key in ["active_task", "waiting", "paused", "frozen"] {
        assert!(
            g.get(key).is_some(),
            "serial_gate.shop lacks `{key}`: {q:#}"
        );
    }
    assert!(q["leases"]["transition"].is_array() && q["leases"]["merge"].is_array());
    assert_eq!(q["tasks"][0]["work_item"], "SHOP-1");
    assert_eq!(q["tasks"][0]["stage"], "analysis");
}

#[test]
fn serial_gate_names_the_task_ahead_and_pause_lets_later_tasks_overtake() {
    let w = World::new();
    assert_eq!(w.add("First", &[]), "SHOP-1");
    assert_eq!(w.add("Second", &[]), "SHOP-2");
    assert_eq!(w.add("Third", &[]), "SHOP-3");
    w.ok(&["cancel", "SHOP-1"], 0);

    // SHOP-2 now holds the gate; SHOP-3 waits behind it.
    let q = w.queue();
    assert_eq!(blocked_by(&q, "SHOP-2"), None, "{q:#}");
    assert_eq!(
        blocked_by(&q, "SHOP-3"),
        Some((
            "serial-gate".to_string(),
            "SHOP-2 (analysis) is ahead in repo shop".to_string()
        )),
        "{q:#}"
    );
    let g = &q["serial_gate"]["shop"];
    assert_eq!(g["active_task"], "SHOP-2", "{q:#}");
    assert_eq!(strings(&g["waiting"]), ["SHOP-3"], "{q:#}");
    assert!(strings(&g["paused"]).is_empty(), "{q:#}");
    assert_eq!(g["frozen"], false);

    let why = w.ok(&["why", "SHOP-3", "--json"], 0).json();
    assert_eq!(why["waits_for"], "serial-gate", "{why:#}");
    let para = why["paragraph"].as_str().unwrap();
    assert!(
        para.contains("serial-gate") && para.contains("SHOP-2"),
        "{para}"
    );
    let text = w.ok(&["why", "SHOP-3"], 0);
    assert!(
        text.stdout.contains("serial-gate") && text.stdout.contains("SHOP-2"),
        "{text:?}"
    );

    // Pausing SHOP-2 lets SHOP-3 overtake; SHOP-2's own job is held.
    let r = w.ok(&["pause", "SHOP-2", "--reason", "lunch"], 0);
    assert!(r.stdout.contains("paused"), "{r:?}");
    let q = w.queue();
    assert_eq!(blocked_by(&q, "SHOP-3"), None, "{q:#}");
    let (why2, detail) = blocked_by(&q, "SHOP-2").expect("SHOP-2's job is held");
    assert_eq!(why2, "paused", "{q:#}");
    assert!(
        detail.contains("lunch") && detail.contains("SHOP-2"),
        "{detail}"
    );
    let g = &q["serial_gate"]["shop"];
    assert_eq!(strings(&g["paused"]), ["SHOP-2"], "{q:#}");
    assert_eq!(g["active_task"], "SHOP-3", "{q:#}");
    assert!(strings(&g["waiting"]).is_empty(), "{q:#}");
    let t2 = q["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["work_item"] == "SHOP-2")
        .unwrap();
    assert_eq!(t2["paused"], true);
    let why = w.ok(&["why", "SHOP-2", "--json"], 0).json();
    assert_eq!(why["waits_for"], "paused", "{why:#}");
    assert!(
        why["paragraph"].as_str().unwrap().contains("lunch"),
        "{why:#}"
    );

    // Pausing again is a no-op that says so and records nothing.
    let before = w.sql("SELECT count(*) FROM transitions");
    let r = w.ok(&["pause", "SHOP-2", "--reason", "again"], 0);
    assert!(r.stdout.contains("already paused"), "{r:?}");
    assert_eq!(w.sql("SELECT count(*) FROM transitions"), before);
    assert_eq!(
        w.sql("SELECT paused_reason FROM tasks WHERE work_item = 'SHOP-2'"),
        "lunch"
    );

    // Resume: SHOP-2 takes part in the gate again and SHOP-3 waits behind it.
    w.ok(&["resume", "SHOP-2"], 0);
    let q = w.queue();
    assert_eq!(blocked_by(&q, "SHOP-2"), None, "{q:#}");
    assert_eq!(
        reason(&q, "SHOP-3").as_deref(),
        Some("serial-gate"),
        "{q:#}"
    );
    assert_eq!(q["serial_gate"]["shop"]["active_task"], "SHOP-2");
    assert!(strings(&q["serial_gate"]["shop"]["paused"]).is_empty());
    // Resuming a task that is not paused is a no-op.
    let r = w.ok(&["resume", "SHOP-2"], 0);
    assert!(r.stdout.contains("not paused"), "{r:?}");
}

#[test]
fn freeze_holds_analyst_jobs_and_names_the_reason() {
    let w = World::new();
    w.add("First", &[]);
    assert_eq!(reason(&w.queue(), "SHOP-1"), None);

    let r = w.ok(&["freeze", "shop", "--reason", "release"], 0);
    assert!(r.stdout.contains("froze"), "{r:?}");
    let q = w.queue();
    let (why, detail) = blocked_by(&q, "SHOP-1").expect("frozen");
    assert_eq!(why, "frozen", "{q:#}");
    assert!(
        detail.contains("release") && detail.contains("shop"),
        "{detail}"
    );
    let f = q["freezes"].as_array().unwrap();
    assert_eq!(f.len(), 1, "{q:#}");
    assert_eq!(f[0]["repo"], "shop");
    assert_eq!(f[0]["reason"], "release");
    assert!(f[0]["frozen_by"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(f[0]["frozen_at"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(q["serial_gate"]["shop"]["frozen"], true);
    let why = w.ok(&["why", "SHOP-1", "--json"], 0).json();
    assert_eq!(why["waits_for"], "frozen", "{why:#}");
    assert!(why["paragraph"].as_str().unwrap().contains("release"));

    // Freezing twice is a no-op.
    let r = w.ok(&["freeze", "shop", "--reason", "again"], 0);
    assert!(r.stdout.contains("already frozen"), "{r:?}");
    assert_eq!(w.queue()["freezes"][0]["reason"], "release");

    w.ok(&["unfreeze", "shop"], 0);
    let q = w.queue();
    assert_eq!(blocked_by(&q, "SHOP-1"), None, "{q:#}");
    assert!(q["freezes"].as_array().unwrap().is_empty(), "{q:#}");
    assert_eq!(q["serial_gate"]["shop"]["frozen"], false);
    let r = w.ok(&["unfreeze", "shop"], 0);
    assert!(r.stdout.contains("not frozen"), "{r:?}");

    // Bad input: unknown or invalid repo, missing reason.
    let r = w.ok(&["freeze", "nope", "--reason", "x"], 2);
    assert!(
        r.stderr.contains("unknown repo") && r.stderr.contains("nope"),
        "{r:?}"
    );
    let r = w.ok(&["freeze", "../x", "--reason", "x"], 2);
    assert!(r.stderr.contains("invalid repo name"), "{r:?}");
    let r = w.ok(&["freeze", "shop"], 2);
    assert!(r.stderr.contains("--reason"), "{r:?}");
    w.ok(&["freeze", "shop", "--reason", "  "], 2);
    w.ok(&["unfreeze", "nope"], 2);
    assert_eq!(w.sql("SELECT count(*) FROM repo_freeze"), "0");
}

#[test]
fn a_freeze_does_not_hold_a_task_past_analysis() {
    let w = World::new();
    w.add("First", &[]);
    w.push_analysis("SHOP-1");
    w.ok(&["approve", "SHOP-1"], 0);
    assert_eq!(w.stage("SHOP-1"), "architecture");
    w.add("Second", &[]);
    w.ok(&["freeze", "shop", "--reason", "release"], 0);
    let q = w.queue();
    let j = job(&q, "SHOP-1");
    assert_eq!(j["role"], "architect");
    assert!(j["blocked_by"].is_null(), "{q:#}");
    // The later task is held by the gate first (SHOP-1 is ahead), the freeze next.
    assert_eq!(
        reason(&q, "SHOP-2").as_deref(),
        Some("serial-gate"),
        "{q:#}"
    );
    w.ok(&["pause", "SHOP-1", "--reason", "x"], 0);
    assert_eq!(reason(&w.queue(), "SHOP-2").as_deref(), Some("frozen"));
}

#[test]
fn a_dependency_shows_until_the_other_task_finishes() {
    let w = World::with_repo_extra("serial_gate: false");
    w.add("First", &[]);
    w.add("Second", &["--depends-on", "SHOP-1"]);
    let q = w.queue();
    assert_eq!(blocked_by(&q, "SHOP-1"), None, "{q:#}");
    let (why, detail) = blocked_by(&q, "SHOP-2").expect("waits for SHOP-1");
    assert_eq!(why, "dependency", "{q:#}");
    assert!(detail.contains("SHOP-1"), "{detail}");
    assert!(
        q["serial_gate"].get("shop").is_none(),
        "a repo without a serial gate has no gate entry: {q:#}"
    );
    let why = w.ok(&["why", "SHOP-2", "--json"], 0).json();
    assert_eq!(why["waits_for"], "dependency", "{why:#}");
    assert!(why["paragraph"].as_str().unwrap().contains("SHOP-1"));

    // Pause does not bypass a declared dependency on the paused task (§3.7).
    w.ok(&["pause", "SHOP-1", "--reason", "lunch"], 0);
    let q = w.queue();
    assert_eq!(reason(&q, "SHOP-2").as_deref(), Some("dependency"), "{q:#}");
    assert_eq!(reason(&q, "SHOP-1").as_deref(), Some("paused"), "{q:#}");

    w.ok(&["cancel", "SHOP-1"], 0);
    let q = w.queue();
    assert_eq!(blocked_by(&q, "SHOP-2"), None, "{q:#}");
    assert!(
        q["queued"]
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j["work_item"] != "SHOP-1"),
        "{q:#}"
    );
}

#[test]
fn a_dependency_cycle_and_an_unknown_dependency_are_refused() {
    let w = World::with_repo_extra("serial_gate: false");
    w.add("First", &[]);
    let before = w.sql("SELECT count(*) FROM tasks");
    let r = w.ok(
        &[
            "task",
            "add",
            "--repo",
            "shop",
            "--title",
            "x",
            "--depends-on",
            "SHOP-9",
        ],
        2,
    );
    assert!(
        r.stderr.contains("SHOP-9") && r.stderr.contains("not found"),
        "{r:?}"
    );
    w.ok(
        &[
            "task",
            "add",
            "--repo",
            "shop",
            "--title",
            "x",
            "--depends-on",
            "../x",
        ],
        2,
    );
    assert_eq!(w.sql("SELECT count(*) FROM tasks"), before);
}

#[test]
fn delayed_and_concurrency_and_breaker_reasons() {
    let w = World::new();
    w.add("First", &[]);
    // The running jobs below belong to another task: one of SHOP-1 itself would make it
    // `task-busy` (see `one_task_never_runs_two_jobs`).
    w.add("Other", &[]);
    let tid = w.task_id("SHOP-1");
    let other = w.task_id("SHOP-2");
    w.sql(&format!(
        "UPDATE jobs SET status = 'cancelled' WHERE task_id = {other} AND status = 'queued'"
    ));
    let jid = job(&w.queue(), "SHOP-1")["job_id"].as_i64().unwrap();
    let t = now();

    // delayed
    w.sql(&format!(
        "UPDATE jobs SET available_at = {} WHERE id = {jid}",
        t + 3600
    ));
    let q = w.queue();
    let (why, detail) = blocked_by(&q, "SHOP-1").expect("delayed");
    assert_eq!(why, "delayed", "{q:#}");
    assert!(detail.starts_with("not before "), "{detail}");
    w.sql(&format!(
        "UPDATE jobs SET available_at = {} WHERE id = {jid}",
        t - 5
    ));
    assert_eq!(blocked_by(&w.queue(), "SHOP-1"), None);

    // concurrency: one running job leaves room, two fill max_concurrency = 2.
    let insert_running = || {
        w.sql(&format!(
            "INSERT INTO jobs (task_id, role, stage, repo, status, attempts, available_at, \
             created_at, started_at) VALUES ({other}, 'developer', 'development', 'shop', \
             'running', 1, {t}, {t}, {t})"
        ));
    };
    insert_running();
    assert_eq!(blocked_by(&w.queue(), "SHOP-1"), None);
    insert_running();
    let q = w.queue();
    assert_eq!(
        blocked_by(&q, "SHOP-1"),
        Some(("concurrency".to_string(), "running 2/2".to_string())),
        "{q:#}"
    );
    assert_eq!(q["counts"]["running"], 2);
    assert_eq!(q["counts"]["queued"], 1);
    assert_eq!(q["running"].as_array().unwrap().len(), 2, "{q:#}");
    assert_eq!(q["running"][0]["work_item"], "SHOP-2");

    // breaker (reported before concurrency)
    w.sql(&format!(
        "INSERT INTO breaker (id, open_until, reason) VALUES (1, {}, 'usage limit')",
        t + 3600
    ));
    let q = w.queue();
    let (why, detail) = blocked_by(&q, "SHOP-1").expect("breaker");
    assert_eq!(why, "breaker", "{q:#}");
    assert!(detail.contains("usage limit"), "{detail}");
    assert_eq!(q["breaker"]["reason"], "breaker", "{q:#}");
    let why = w.ok(&["why", "SHOP-1", "--json"], 0).json();
    assert_eq!(why["waits_for"], "breaker", "{why:#}");
    let text = w.ok(&["queue"], 0);
    assert!(text.stdout.contains("breaker"), "{text:?}");

    // An expired breaker no longer holds.
    w.sql(&format!(
        "UPDATE breaker SET open_until = {} WHERE id = 1",
        t - 10
    ));
    let q = w.queue();
    assert_eq!(
        reason(&q, "SHOP-1").as_deref(),
        Some("concurrency"),
        "{q:#}"
    );
    assert!(q["breaker"].is_null(), "{q:#}");
    w.sql(&format!(
        "UPDATE breaker SET open_until = {} WHERE id = 1",
        t + 3600
    ));

    // held (reported before breaker)
    w.sql(&format!(
        "UPDATE tasks SET held_at = {t}, held_reason = 'no docker' WHERE id = {tid}"
    ));
    let q = w.queue();
    let (why, detail) = blocked_by(&q, "SHOP-1").expect("held");
    assert_eq!(why, "held", "{q:#}");
    assert!(detail.contains("no docker"), "{detail}");
    assert_eq!(q["tasks"][0]["held"], true);
    let why = w.ok(&["why", "SHOP-1", "--json"], 0).json();
    assert_eq!(why["waits_for"], "held", "{why:#}");
    assert!(why["paragraph"].as_str().unwrap().contains("no docker"));

    // blocked (reported before held)
    w.sql(&format!(
        "UPDATE tasks SET blocked_at = {t}, blocked_reason = 'retries exhausted' WHERE id = {tid}"
    ));
    let q = w.queue();
    let (why, detail) = blocked_by(&q, "SHOP-1").expect("blocked");
    assert_eq!(why, "blocked", "{q:#}");
    assert!(detail.contains("retries exhausted"), "{detail}");

    // delayed wins over everything, unless its delay ends within the open breaker's: then the
    // breaker is what it waits for (a usage limit delays its job to the breaker's end).
    w.sql(&format!(
        "UPDATE jobs SET available_at = {} WHERE id = {jid}",
        t + 7200
    ));
    assert_eq!(reason(&w.queue(), "SHOP-1").as_deref(), Some("delayed"));
    w.sql(&format!(
        "UPDATE jobs SET available_at = {} WHERE id = {jid}",
        t + 600
    ));
    assert_eq!(reason(&w.queue(), "SHOP-1").as_deref(), Some("breaker"));
}

#[test]
fn counts_cover_only_jobs_finished_in_the_last_24_hours() {
    let w = World::new();
    w.add("First", &[]);
    let tid = w.task_id("SHOP-1");
    let counts = |w: &World| {
        let q = w.queue();
        ["queued", "running", "done", "failed", "cancelled"]
            .map(|k| q["counts"][k].as_u64().unwrap())
    };
    assert_eq!(counts(&w), [1, 0, 0, 0, 0]);
    let t = now();
    let finished = |status: &str, ago: i64| {
        let at = t - ago;
        w.sql(&format!(
            "INSERT INTO jobs (task_id, role, stage, repo, status, attempts, available_at, \
             created_at, started_at, finished_at) VALUES ({tid}, 'analyst', 'analysis', 'shop', \
             '{status}', 1, {at}, {at}, {at}, {at})"
        ));
    };
    // Three days ago, and just over a day ago: history, not counted.
    for status in ["done", "failed", "cancelled"] {
        finished(status, 3 * 86_400);
        finished(status, 86_400 + 120);
    }
    assert_eq!(counts(&w), [1, 0, 0, 0, 0]);
    // Recent: counted.
    finished("done", 3600);
    finished("done", 86_400 - 120);
    finished("failed", 60);
    finished("cancelled", 10);
    assert_eq!(counts(&w), [1, 0, 2, 1, 1]);
    // Cancelling a task cancels its queued job: one more cancelled, one fewer queued.
    w.ok(&["cancel", "SHOP-1"], 0);
    assert_eq!(counts(&w), [0, 0, 2, 1, 2]);
    let text = w.ok(&["queue"], 0);
    assert!(
        text.stdout.contains("done 2, failed 1, cancelled 2"),
        "{text:?}"
    );
}

#[test]
fn text_queue_names_the_wait_reasons() {
    let w = World::new();
    w.add("First", &[]);
    w.add("Second", &[]);
    let r = w.ok(&["queue"], 0);
    assert!(r.stdout.contains("serial-gate"), "{r:?}");
    assert!(
        r.stdout.contains("SHOP-1") && r.stdout.contains("SHOP-2"),
        "{r:?}"
    );
    assert!(r.stdout.contains("claimable"), "{r:?}");
    let r = w.ok(&["queue", "--repo", "shop"], 0);
    assert!(r.stdout.contains("serial-gate"), "{r:?}");
    let r = w.ok(&["queue", "--repo", "nope"], 2);
    assert!(r.stderr.contains("unknown repo"), "{r:?}");
    w.ok(&["freeze", "shop", "--reason", "release"], 0);
    let r = w.ok(&["queue"], 0);
    assert!(r.stdout.contains("release"), "{r:?}");
}

/// SPEC §3.7: "who/when/why show in `orch queue` and `orch why`" — for a pause as for a freeze.
#[test]
fn queue_and_why_say_who_paused_a_task_and_when() {
    let w = World::new();
    w.add("First", &[]);
    let r = w.orch_with(
        &["pause", "SHOP-1", "--reason", "lunch"],
        &[("USER", "alice")],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let r = w.orch_with(
        &["freeze", "shop", "--reason", "release"],
        &[("USER", "bob")],
    );
    assert_eq!(r.code, 0, "{r:?}");

    let why = w.ok(&["why", "SHOP-1", "--json"], 0).json();
    let para = why["paragraph"].as_str().unwrap();
    assert!(
        para.contains("alice") && para.contains("lunch") && para.contains("since"),
        "{para}"
    );
    let q = w.queue();
    assert_eq!(q["freezes"][0]["frozen_by"], "bob", "{q:#}");
    let (why, detail) = blocked_by(&q, "SHOP-1").expect("paused");
    assert_eq!(why, "paused");
    assert!(
        detail.contains("lunch") && detail.contains("since"),
        "{detail}"
    );
    assert!(
        detail.contains("alice"),
        "`orch queue` must say who paused the task (SPEC §3.7), as it does for a freeze: {detail}"
    );
}

/// With `ci.mode: status` a webhook advanced a task while its developer still ran, and the next
/// tick started the reviewer in the same worktree. One task never has two running jobs: a
/// queued job of a task whose other job runs waits as `task-busy`, naming that job.
#[test]
fn one_task_never_runs_two_jobs() {
    let w = World::new();
    w.add("First", &[]);
    let tid = w.task_id("SHOP-1");
    let t = now();
    w.sql(&format!(
        "INSERT INTO jobs (task_id, role, stage, repo, status, attempts, available_at, \
         created_at, started_at) VALUES ({tid}, 'analyst', 'analysis', 'shop', 'running', 1, \
         {t}, {t}, {t})"
    ));
    let running = w.sql(&format!(
        "SELECT id FROM jobs WHERE task_id = {tid} AND status = 'running'"
    ));
    let q = w.queue();
    assert_eq!(
        blocked_by(&q, "SHOP-1"),
        Some((
            "task-busy".to_string(),
            format!("SHOP-1 is already running job {running}")
        )),
        "{q:#}"
    );
    let why = w.orch(&["why", "SHOP-1"]);
    assert!(
        why.stdout.contains("task-busy") || why.stdout.contains("already running job"),
        "{why:?}"
    );
    // The claim agrees: a tick launches nothing for it.
    let plan = w.orch(&["tick", "--plan"]);
    assert!(!plan.stdout.contains("launch job"), "{plan:?}");
}

/// A tick claims job after job from the world it gathered for the first claim, as long as no
/// other process writes in between: the reused world must still count its own claims, so a
/// second queued job of a task it just claimed for waits (`task-busy`), and the pass stops at
/// `max_concurrency` (2 here) however many jobs are claimable.
#[test]
fn a_pass_counts_its_own_claims_one_job_per_task_and_the_limit() {
    let w = World::with_repo_extra("serial_gate: false");
    w.add("First", &[]);
    let tid = w.task_id("SHOP-1");
    let t = now();
    // SHOP-1's second job comes right after its first in the FIFO.
    w.sql(&format!(
        "INSERT INTO jobs (task_id, role, stage, repo, status, attempts, available_at, \
         created_at) VALUES ({tid}, 'analyst', 'analysis', 'shop', 'queued', 0, {t}, {t})"
    ));
    w.add("Second", &[]);
    w.add("Third", &[]);
    let r = w.orch_with(&["tick", "--json"], &[("STUB_HANG", "analyst")]);
    assert_eq!(r.code, 0, "{r:?}");
    let rep = r.json();
    assert_eq!(rep["launched"], 2, "{rep:#}");
    let running = w.sql(
        "SELECT group_concat(t.work_item, ' ') FROM jobs j JOIN tasks t ON t.id = j.task_id \
         WHERE j.status = 'running' ORDER BY j.id",
    );
    assert_eq!(
        running, "SHOP-1 SHOP-2",
        "one job per task, FIFO, two slots"
    );
    assert_eq!(
        w.sql("SELECT count(*) FROM jobs WHERE status = 'queued'"),
        "2",
        "SHOP-1's second job and SHOP-3's wait"
    );
    // A second pass finds every slot taken and claims nothing.
    let again = w
        .orch_with(&["tick", "--json"], &[("STUB_HANG", "analyst")])
        .json();
    assert_eq!(again["launched"], 0, "{again:#}");
    assert_eq!(
        w.sql("SELECT count(*) FROM jobs WHERE status = 'running'"),
        "2"
    );
}
