//! `orch ingest` and `orch events` end to end: signed Plane and Gitea deliveries drive real tasks
//! in a temp world; forged, unsigned, oversize and malformed ones are rejected and kept in the
//! inbox; duplicates act once; `--replay` re-drives a stored delivery.

use crate::support::webhooks::{self, plane_issue, sign, signed_headers, signed_services};
use crate::support::{Run, World, feed, git};
use serde_json::{Value, json};

const PLANE_VAR: &str = "ORCH_TEST_PLANE_HOOK_SECRET";
const GITEA_VAR: &str = "ORCH_TEST_GITEA_HOOK_SECRET";
const PLANE_SECRET: &str = "plane-hook-secret-1";
const GITEA_SECRET: &str = "gitea-hook-secret-1";

/// A world whose repo `shop` is Plane project `PLANE_PROJECT`, with CI status gating
/// development, and `tracker`/`forge` blocks naming the secret variables (or `services`, other
/// top-level YAML, instead).
fn world(services: &str) -> World {
    if services.is_empty() {
        webhooks::world(&signed_services(PLANE_VAR, GITEA_VAR))
    } else {
        webhooks::world(services)
    }
}

/// `orch ingest <source> --json` with `body` on stdin, `headers`, and `env` on the process.
fn ingest_env(
    w: &World,
    source: &str,
    headers: &[(&str, String)],
    body: &[u8],
    env: &[(&str, &str)],
) -> Run {
    let mut args = vec!["ingest".to_string(), source.to_string(), "--json".into()];
    for (n, v) in headers {
        args.push("--header".into());
        args.push(format!("{n}: {v}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = w.orch_cmd(&args);
    cmd.env_remove(PLANE_VAR)
        .env_remove(GITEA_VAR)
        .envs(env.iter().copied());
    feed(&mut cmd, body)
}

const SECRETS: [(&str, &str); 2] = [(PLANE_VAR, PLANE_SECRET), (GITEA_VAR, GITEA_SECRET)];

/// A correctly signed Plane delivery.
fn plane(w: &World, delivery: &str, body: &[u8]) -> Run {
    let headers = signed_headers("plane", delivery, "issue", PLANE_SECRET, body);
    ingest_env(w, "plane", &headers, body, &SECRETS)
}

/// A correctly signed Gitea delivery of `event`.
fn gitea(w: &World, delivery: &str, event: &str, body: &[u8]) -> Run {
    let headers = signed_headers("gitea", delivery, event, GITEA_SECRET, body);
    ingest_env(w, "gitea", &headers, body, &SECRETS)
}

fn expect(r: &Run, code: i32, outcome: &str) -> Value {
    assert_eq!(r.code, code, "{r:?}");
    let v = r.json();
    assert_eq!(v["outcome"], outcome, "{v:#}");
    assert_eq!(v["schema_version"], 1, "{v:#}");
    v
}

fn task_count(w: &World) -> String {
    w.sql("SELECT count(*) FROM tasks")
}

fn events(w: &World, rejected: bool) -> Vec<Value> {
    let mut args = vec!["events", "--json"];
    if rejected {
        args.push("--rejected");
    }
    let v = w.ok(&args, 0).json();
    assert_eq!(v["schema_version"], 1);
    v["events"].as_array().unwrap().clone()
}

#[test]
fn a_signed_to_analyse_delivery_creates_and_starts_the_task_once() {
    let w = world("");
    let body = plane_issue(
        7,
        "To Analyse",
        "Add a health endpoint",
        &["bug", "frontend"],
    );
    let v = expect(&plane(&w, "d-7", &body), 0, "processed");
    assert_eq!(v["work_item"], "SHOP-7", "{v:#}");
    assert_eq!(v["source"], "plane");
    assert_eq!(v["event"], "issue");
    assert_eq!(v["delivery_id"], "d-7");

    let s = w.show("SHOP-7");
    assert_eq!(s["stage"], "analysis", "{s:#}");
    assert_eq!(s["title"], "Add a health endpoint");
    assert_eq!(
        s["track"], "bug",
        "the `bug` label puts it on the bug track: {s:#}"
    );
    assert_eq!(
        s["labels"],
        json!(["bug"]),
        "only the labels orch knows: {s:#}"
    );
    let jobs = s["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{s:#}");
    assert_eq!(jobs[0]["role"], "analyst");
    assert_eq!(jobs[0]["status"], "queued");
    assert_eq!(
        w.sql("SELECT description FROM tasks WHERE work_item = 'SHOP-7'"),
        "Customers want to know the shop is up."
    );
    assert_eq!(
        w.sql("SELECT tracker_ref FROM tasks WHERE work_item = 'SHOP-7'"),
        "1a2b3c4d-0000-4000-8000-000000000007",
        "the task is linked to its Plane issue"
    );

    // The same delivery again: a duplicate, nothing changes.
    let before = (
        w.sql("SELECT count(*) FROM jobs"),
        w.sql("SELECT count(*) FROM transitions"),
    );
    let v = expect(&plane(&w, "d-7", &body), 0, "duplicate");
    assert!(
        v["reason"].as_str().unwrap().contains("already accepted"),
        "{v:#}"
    );
    let after = (
        w.sql("SELECT count(*) FROM jobs"),
        w.sql("SELECT count(*) FROM transitions"),
    );
    assert_eq!(before, after);
    assert_eq!(task_count(&w), "1");

    // A new delivery of the same state change (Plane re-sends on every edit, with a new
    // `updated_at`) is ignored.
    let again = plane_issue(
        7,
        "To Analyse",
        "Add a health endpoint",
        &["bug", "frontend"],
    );
    assert_ne!(again, body);
    let v = expect(&plane(&w, "d-7b", &again), 0, "ignored");
    assert!(
        v["reason"].as_str().unwrap().contains("already started"),
        "{v:#}"
    );

    // Every delivery has its own inbox row, newest first.
    let ev = events(&w, false);
    let outcomes: Vec<&str> = ev.iter().map(|e| e["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["ignored", "duplicate", "processed"]);
    assert!(
        ev.iter()
            .all(|e| e["received_at"].as_str().unwrap().ends_with('Z'))
    );

    // The plain line names the outcome and the delivery.
    let text = w.orch(&["events"]).stdout;
    assert!(
        text.contains("d-7b") && text.contains("duplicate"),
        "{text}"
    );
}

#[test]
fn wrong_missing_and_unconfigured_signatures_are_rejected_and_stored() {
    let w = world("");
    let body = plane_issue(8, "To Analyse", "Forged", &[]);
    // (headers besides the delivery id, the environment of orch, what the reason says)
    type Case<'a> = (Vec<(&'a str, String)>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec![("X-Plane-Signature", sign("not-the-secret", &body))],
            SECRETS.to_vec(),
            "bad signature",
        ),
        (
            vec![("X-Plane-Signature", "sha256=zz".into())],
            SECRETS.to_vec(),
            "bad signature",
        ),
        (
            vec![],
            SECRETS.to_vec(),
            "missing signature header `X-Plane-Signature`",
        ),
        (
            vec![("X-Plane-Signature", sign(PLANE_SECRET, &body))],
            vec![],
            PLANE_VAR,
        ),
    ];
    for (i, (headers, env, why)) in cases.iter().enumerate() {
        let mut headers = headers.clone();
        headers.push(("X-Plane-Delivery", format!("forged-{i}")));
        let r = ingest_env(&w, "plane", &headers, &body, env);
        let v = expect(&r, 2, "rejected");
        assert!(v["reason"].as_str().unwrap().contains(why), "{why}: {v:#}");
    }
    assert_eq!(task_count(&w), "0", "no task from a rejected delivery");
    let rejected = events(&w, true);
    assert_eq!(rejected.len(), 4, "{rejected:#?}");
    assert!(rejected.iter().all(|e| e["outcome"] == "rejected"));
    assert_eq!(rejected[3]["delivery_id"], "forged-0");
    assert!(rejected[0]["reason"].as_str().unwrap().contains(PLANE_VAR));

    // The plain form exits 2 too and says why on stdout.
    let r = feed(
        w.orch_cmd(&["ingest", "plane"])
            .env(PLANE_VAR, PLANE_SECRET),
        &body,
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stdout.starts_with("rejected: plane delivery `sha256:"),
        "{r:?}"
    );
}

/// A signed body, once accepted, was acted on again when it was re-sent under a new delivery
/// id, or none: the same issue was started twice. Its digest now dedups it for 7 days.
#[test]
fn an_accepted_body_re_sent_under_a_new_or_missing_id_is_a_duplicate() {
    let w = world("");
    let body = plane_issue(13, "To Analyse", "Once only", &[]);
    expect(&plane(&w, "b-1", &body), 0, "processed");
    // Cancelled, so a To Analyse that acted again would start a second task.
    w.ok(&["cancel", "SHOP-13"], 0);
    assert_eq!(task_count(&w), "1");

    let v = expect(&plane(&w, "b-2", &body), 0, "duplicate");
    let reason = v["reason"].as_str().unwrap();
    assert!(
        reason.contains("same body") && reason.contains("event 1"),
        "{v:#}"
    );
    // Without a delivery id (the id is then the body's own hash).
    let unnamed: Vec<(&str, String)> = signed_headers("plane", "-", "issue", PLANE_SECRET, &body)
        .into_iter()
        .filter(|(n, _)| *n != "X-Plane-Delivery")
        .collect();
    let v = expect(
        &ingest_env(&w, "plane", &unnamed, &body, &SECRETS),
        0,
        "duplicate",
    );
    assert!(
        v["delivery_id"].as_str().unwrap().starts_with("sha256:"),
        "{v:#}"
    );
    assert_eq!(task_count(&w), "1", "the issue was not started again");
    // Rejected or duplicate rows of the body did not make it count twice: one accepted row.
    assert_eq!(
        w.sql("SELECT count(*) FROM events WHERE outcome = 'duplicate'"),
        "2"
    );

    // Another source's body with the same bytes is not the same delivery.
    let v = expect(&gitea(&w, "b-3", "issue", &body), 0, "ignored");
    assert!(
        !v["reason"].as_str().unwrap().contains("same body"),
        "{v:#}"
    );

    // Older than 7 days, the body counts no more: it acts again.
    w.sql("UPDATE events SET received_at = received_at - 8 * 86400");
    let v = expect(&plane(&w, "b-4", &body), 0, "processed");
    assert_eq!(v["work_item"], "SHOP-13", "{v:#}");
    assert_eq!(task_count(&w), "2");
}

#[test]
fn a_forged_delivery_reusing_a_real_id_does_not_suppress_the_real_one() {
    let w = world("");
    let real = plane_issue(9, "To Analyse", "Real work", &[]);
    let forged = plane_issue(9, "Backlog", "Forged", &[]);
    let r = ingest_env(
        &w,
        "plane",
        &[
            ("X-Plane-Delivery", "shared-id".into()),
            ("X-Plane-Signature", sign("attacker", &forged)),
        ],
        &forged,
        &SECRETS,
    );
    expect(&r, 2, "rejected");
    let v = expect(&plane(&w, "shared-id", &real), 0, "processed");
    assert_eq!(v["work_item"], "SHOP-9");
    assert_eq!(w.show("SHOP-9")["stage"], "analysis");
}

#[test]
fn unsigned_deliveries_pass_only_where_allow_unsigned_is_set() {
    let w = world("tracker:\n  kind: plane\n  allow_unsigned: true\nforge:\n  kind: gitea\n");
    let body = plane_issue(10, "To Analyse", "Unsigned but allowed", &[]);
    let r = ingest_env(
        &w,
        "plane",
        &[("X-Plane-Delivery", "u-1".into())],
        &body,
        &[],
    );
    let v = expect(&r, 0, "processed");
    assert!(
        v["reason"].as_str().unwrap().contains("accepted unsigned"),
        "the inbox says it was not verified: {v:#}"
    );
    assert_eq!(w.show("SHOP-10")["stage"], "analysis");

    // The forge block has no secret and no allow_unsigned: everything is rejected.
    let status = json!({"sha": "a".repeat(40), "state": "success", "context": "ci",
                        "repository": {"name": "shop"}});
    let r = ingest_env(
        &w,
        "gitea",
        &[("X-Gitea-Event", "status".into())],
        &serde_json::to_vec(&status).unwrap(),
        &[],
    );
    let v = expect(&r, 2, "rejected");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("forge.webhook_secret_env"),
        "{v:#}"
    );
}

#[test]
fn approved_confirm_and_stop_deliveries_act_on_the_task() {
    let w = world("");
    expect(
        &plane(&w, "a-1", &plane_issue(11, "To Analyse", "Approve me", &[])),
        0,
        "processed",
    );
    // Approved before the analysis exists: recorded, the gate says what is missing.
    let v = expect(
        &plane(&w, "a-2", &plane_issue(11, "Approved", "Approve me", &[])),
        0,
        "processed",
    );
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("approval of `SHOP-11` recorded"),
        "{v:#}"
    );
    assert_eq!(w.stage("SHOP-11"), "analysis");
    w.push_analysis("SHOP-11");
    let v = expect(
        &plane(&w, "a-3", &plane_issue(11, "Approved", "Approve me", &[])),
        0,
        "processed",
    );
    assert!(
        v["reason"].as_str().unwrap().contains("approved `SHOP-11`"),
        "{v:#}"
    );
    assert_eq!(w.stage("SHOP-11"), "architecture");

    // Approved again (the tracker echoes it on every edit): does nothing, says why.
    let v = expect(
        &plane(&w, "a-4", &plane_issue(11, "Approved", "Approve me", &[])),
        0,
        "ignored",
    );
    assert!(
        v["reason"].as_str().unwrap().contains("does nothing"),
        "{v:#}"
    );
    // Confirm Deploy outside `deploy`, and a state with no meaning: ignored with a reason.
    let v = expect(
        &plane(
            &w,
            "a-5",
            &plane_issue(11, "Confirm Deploy", "Approve me", &[]),
        ),
        0,
        "ignored",
    );
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("in `architecture` does nothing"),
        "{v:#}"
    );
    let v = expect(
        &plane(
            &w,
            "a-6",
            &plane_issue(11, "In Progress", "Approve me", &[]),
        ),
        0,
        "ignored",
    );
    assert_eq!(v["reason"], "state `In Progress` has no action");

    // STOP cancels; a second STOP finds nothing to stop.
    let v = expect(
        &plane(&w, "a-7", &plane_issue(11, "STOP", "Approve me", &[])),
        0,
        "processed",
    );
    assert!(v["reason"].as_str().unwrap().contains("cancelled"), "{v:#}");
    assert_eq!(w.stage("SHOP-11"), "cancelled");
    expect(
        &plane(&w, "a-8", &plane_issue(11, "STOP", "Approve me", &[])),
        0,
        "ignored",
    );
    // A project orch does not know is ignored.
    let mut other: Value =
        serde_json::from_slice(&plane_issue(12, "To Analyse", "x", &[])).unwrap();
    other["data"]["project"] = json!("99999999-0000-4000-8000-000000000000");
    let v = expect(
        &plane(&w, "a-9", &serde_json::to_vec(&other).unwrap()),
        0,
        "ignored",
    );
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("not in the registry"),
        "{v:#}"
    );
    assert_eq!(task_count(&w), "1");
}

/// A task started by the tracker and walked to `development` by hand, with code pushed; returns
/// (work item, the branch head on the remote).
fn in_development(w: &World, seq: u64, delivery: &str) -> (String, String) {
    let wi = format!("SHOP-{seq}");
    expect(
        &plane(
            w,
            delivery,
            &plane_issue(seq, "To Analyse", "Checkout page", &[]),
        ),
        0,
        "processed",
    );
    w.push_analysis(&wi);
    w.ok(&["approve", &wi], 0);
    w.push_adr(&wi);
    w.ok(&["advance", &wi], 0);
    assert_eq!(w.stage(&wi), "development");
    w.push_code(&wi, "the checkout");
    let branch = w.branch_of(&wi);
    let head = git(&w.remote, &["rev-parse", &format!("refs/heads/{branch}")]);
    (wi, head)
}

fn status(sha: &str, state: &str, description: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "id": 42,
        "sha": sha,
        "state": state,
        "context": "ci/build",
        "description": description,
        "target_url": "http://ci.invalid/build/42",
        "repository": {"id": 1, "name": "shop", "full_name": "team/shop",
                       "clone_url": "http://forge.invalid/team/shop.git"},
        "sender": {"login": "ci"}
    }))
    .unwrap()
}

/// With `ci.mode: status`, a `success` for the architect's docs-only head — arriving while the
/// developer still worked — advanced `development → review`, and the developer's code was never
/// reviewed. A status counts only for a head with code written during this visit.
#[test]
fn a_green_status_for_a_docs_only_head_does_not_skip_development() {
    let w = world("");
    let wi = "SHOP-21".to_string();
    expect(
        &plane(
            &w,
            "d-start",
            &plane_issue(21, "To Analyse", "Docs first", &[]),
        ),
        0,
        "processed",
    );
    w.push_analysis(&wi);
    w.ok(&["approve", &wi], 0);
    w.push_adr(&wi);
    w.ok(&["advance", &wi], 0);
    assert_eq!(w.stage(&wi), "development");
    let branch = w.branch_of(&wi);
    let docs_head = git(&w.remote, &["rev-parse", &format!("refs/heads/{branch}")]);
    let v = expect(
        &gitea(&w, "d-1", "status", &status(&docs_head, "success", "ok")),
        0,
        "processed",
    );
    assert_eq!(w.stage(&wi), "development", "{v:#}");
    let r = w.orch(&["advance", &wi, "--json"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.json()["reason"]
            .as_str()
            .unwrap()
            .contains("no commit outside"),
        "{r:?}"
    );
    // Code pushed and its own success: now it passes.
    w.push_code(&wi, "the feature");
    let head = git(&w.remote, &["rev-parse", &format!("refs/heads/{branch}")]);
    expect(
        &gitea(&w, "d-2", "status", &status(&head, "success", "ok")),
        0,
        "processed",
    );
    assert_eq!(w.stage(&wi), "review");
}

/// A task started from Plane was recorded with actor `operator`, and its tracker comment said
/// "by: operator": the tracker started it, as `webhook`.
#[test]
fn a_task_started_from_plane_is_recorded_as_the_webhooks_doing() {
    // A tracker orch can write to (nothing listens: the rows only wait in the outbox).
    let w = world(&format!(
        "tracker:\n  kind: plane\n  base_url: http://127.0.0.1:9\n  workspace: team\n  \
         token_env: ORCH_TEST_UNSET_PLANE_TOKEN\n  webhook_secret_env: {PLANE_VAR}\n\
         forge:\n  kind: gitea\n  webhook_secret_env: {GITEA_VAR}\n"
    ));
    expect(
        &plane(
            &w,
            "w-1",
            &plane_issue(22, "To Analyse", "From the tracker", &[]),
        ),
        0,
        "processed",
    );
    let actor = w.sql(
        "SELECT t.actor FROM transitions t JOIN tasks k ON k.id = t.task_id \
         WHERE k.work_item = 'SHOP-22' AND t.from_stage = 'created'",
    );
    assert_eq!(actor, "webhook");
    let comment =
        w.sql("SELECT payload FROM outbox WHERE kind = 'plane.comment' ORDER BY id LIMIT 1");
    assert!(comment.contains("by: webhook"), "{comment}");
}

#[test]
fn gitea_status_success_on_the_head_advances_and_failure_rolls_back() {
    let w = world("");
    let (wi, head) = in_development(&w, 20, "g-start");

    // Pending is recorded and decides nothing.
    let v = expect(
        &gitea(&w, "s-0", "status", &status(&head, "pending", "running")),
        0,
        "processed",
    );
    assert_eq!(w.stage(&wi), "development", "{v:#}");

    // Success on some other commit is recorded, nothing moves.
    let v = expect(
        &gitea(
            &w,
            "s-1",
            "status",
            &status(&"b".repeat(40), "success", "ok"),
        ),
        0,
        "processed",
    );
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("no `development` task"),
        "{v:#}"
    );
    assert_eq!(w.stage(&wi), "development");

    let v = expect(
        &gitea(
            &w,
            "s-2",
            "status",
            &status(&head, "success", "Build passed"),
        ),
        0,
        "processed",
    );
    assert_eq!(v["work_item"], wi.as_str(), "{v:#}");
    assert_eq!(w.stage(&wi), "review", "{v:#}");
    assert_eq!(
        w.sql(&format!(
            "SELECT state FROM ci_status WHERE sha = '{head}' AND context = 'ci/build'"
        )),
        "success"
    );
    let s = w.show(&wi);
    let hop = s["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["from"] == "development" && t["to"] == "review")
        .unwrap_or_else(|| panic!("{s:#}"));
    assert_eq!(hop["actor"], "webhook", "{hop:#}");

    // A second task: its CI fails.
    let (wi2, head2) = in_development(&w, 21, "g-start-2");
    let v = expect(
        &gitea(
            &w,
            "s-3",
            "status",
            &status(&head2, "failure", "3 tests failed"),
        ),
        0,
        "processed",
    );
    assert!(
        v["reason"].as_str().unwrap().contains("rolled-back"),
        "{v:#}"
    );
    let s = w.show(&wi2);
    assert_eq!(s["stage"], "development", "{s:#}");
    assert_eq!(s["dev_retries"], 1, "{s:#}");
    let last = s["jobs"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "developer", "{s:#}");
    assert_eq!(last["status"], "queued", "{s:#}");
    let prompt = w.sql(&format!(
        "SELECT prompt FROM jobs WHERE id = {}",
        last["id"]
    ));
    assert!(
        prompt.contains("ci/build") && prompt.contains("3 tests failed"),
        "the developer is told which check failed: {prompt}"
    );
}

/// Two forge owners each had a repo `shop`; a status of `fork/shop` was recorded for (and could
/// advance a task of) the configured `shop` of `team`, matched by the bare repo name.
#[test]
fn a_gitea_repo_is_matched_by_owner_and_name_not_by_its_bare_name() {
    let w = world("");
    // A second configured repo, `fork/shop` on the forge, listed before `team/shop`.
    let text = std::fs::read_to_string(&w.config).unwrap();
    let fork = format!(
        "repos:\n  - name: shop-fork\n    remote: {}\n    prefix: FORK\n    \
         forge_repo: fork/shop\n    ci: {{mode: status}}\n",
        w.remote.display()
    );
    std::fs::write(&w.config, text.replacen("repos:\n", &fork, 1)).unwrap();
    let (wi, head) = in_development(&w, 23, "o-start");
    let of = |full_name: &str| {
        let mut v: Value = serde_json::from_slice(&status(&head, "success", "ok")).unwrap();
        v["repository"]["full_name"] = json!(full_name);
        serde_json::to_vec(&v).unwrap()
    };

    // `fork/shop` is `shop-fork`: recorded there, and the `shop` task does not move.
    let v = expect(
        &gitea(&w, "o-1", "status", &of("fork/shop")),
        0,
        "processed",
    );
    assert!(
        v["reason"].as_str().unwrap().contains("in `shop-fork`"),
        "{v:#}"
    );
    assert_eq!(w.stage(&wi), "development", "{v:#}");
    assert_eq!(
        w.sql(&format!("SELECT repo FROM ci_status WHERE sha = '{head}'")),
        "shop-fork"
    );

    // An owner orch does not know is ignored, whatever the repo is called.
    let v = expect(&gitea(&w, "o-2", "status", &of("other/shop")), 0, "ignored");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("`other/shop` is not configured"),
        "{v:#}"
    );
    assert_eq!(w.stage(&wi), "development");

    // `team/shop` is `shop`: its task advances.
    expect(
        &gitea(&w, "o-3", "status", &of("team/shop")),
        0,
        "processed",
    );
    assert_eq!(w.stage(&wi), "review");
}

#[test]
fn a_merged_pull_request_releases_the_merge_lease_held_for_its_branch() {
    let w = world("");
    expect(
        &plane(&w, "m-0", &plane_issue(30, "To Analyse", "Merge me", &[])),
        0,
        "processed",
    );
    let branch = w.branch_of("SHOP-30");
    w.sql(
        "INSERT INTO merge_lease (repo, task_id, owner_kind, pid, start_time, boot_id, acquired_at) \
         SELECT 'shop', id, 'merge', 1, 1, 'boot', 0 FROM tasks WHERE work_item = 'SHOP-30'",
    );
    let pr = |head: &str| {
        serde_json::to_vec(&json!({
            "action": "closed", "number": 3,
            "pull_request": {"id": 9, "merged": true, "head": {"ref": head, "sha": "c".repeat(40)},
                             "base": {"ref": "main"}, "merge_commit_sha": "d".repeat(40)},
            "repository": {"name": "shop", "full_name": "team/shop"}
        }))
        .unwrap()
    };
    let v = expect(
        &gitea(&w, "p-1", "pull_request", &pr("feature/other")),
        0,
        "ignored",
    );
    assert!(
        v["reason"].as_str().unwrap().contains("not this one"),
        "{v:#}"
    );
    assert_eq!(w.sql("SELECT count(*) FROM merge_lease"), "1");
    let v = expect(
        &gitea(&w, "p-2", "pull_request", &pr(&branch)),
        0,
        "processed",
    );
    assert!(v["reason"].as_str().unwrap().contains("released"), "{v:#}");
    assert_eq!(w.sql("SELECT count(*) FROM merge_lease"), "0");
    // An opened pull request does nothing.
    let opened = serde_json::to_vec(
        &json!({"action": "opened", "pull_request": {"merged": false},
                                            "repository": {"name": "shop"}}),
    )
    .unwrap();
    expect(&gitea(&w, "p-3", "pull_request", &opened), 0, "ignored");
}

#[test]
fn oversize_and_malformed_bodies_are_rejected_with_the_body_capped() {
    let w = world("");
    let mut big = b"{\"event\": \"issue\", \"pad\": \"".to_vec();
    big.resize(2 << 20, b'x');
    let v = expect(&plane(&w, "big-1", &big), 2, "rejected");
    assert!(
        v["reason"].as_str().unwrap().starts_with("body too large"),
        "{v:#}"
    );
    assert_eq!(
        w.sql("SELECT length(body), body_size FROM events WHERE delivery_id = 'big-1'"),
        "65536|1048577",
        "a rejected body is stored cut at 64 KiB; the size read is one past the limit"
    );
    let v = expect(
        &plane(&w, "bad-1", b"{\"event\": \"issue\","),
        2,
        "rejected",
    );
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .starts_with("malformed body: "),
        "{v:#}"
    );
    assert_eq!(task_count(&w), "0");
}

#[test]
fn secrets_are_never_stored_in_the_inbox() {
    let w = world(&format!(
        "tracker:\n  kind: plane\n  token_env: ORCH_TEST_PLANE_TOKEN\n  webhook_secret_env: {PLANE_VAR}\n"
    ));
    let body = plane_issue(40, "Backlog", "x", &[]);
    let r = ingest_env(
        &w,
        "plane",
        &[
            ("X-Plane-Delivery", "s-1".into()),
            ("X-Plane-Signature", sign(PLANE_SECRET, &body)),
            ("Authorization", "Bearer tok-abcdef-123".into()),
            ("X-Echo", format!("secret={PLANE_SECRET}")),
        ],
        &body,
        &[
            (PLANE_VAR, PLANE_SECRET),
            ("ORCH_TEST_PLANE_TOKEN", "tok-abcdef-123"),
        ],
    );
    expect(&r, 0, "ignored");
    let headers = w.sql("SELECT headers FROM events");
    assert!(!headers.contains("tok-abcdef-123"), "{headers}");
    assert!(!headers.contains(PLANE_SECRET), "{headers}");
    assert!(headers.contains("x-plane-signature"), "{headers}");
}

#[test]
fn replay_re_drives_a_stored_delivery() {
    let w = world("");
    expect(
        &plane(&w, "r-1", &plane_issue(50, "To Analyse", "Replay me", &[])),
        0,
        "processed",
    );
    // Approved before the analysis files: the approval is recorded, the task stays.
    expect(
        &plane(&w, "r-2", &plane_issue(50, "Approved", "Replay me", &[])),
        0,
        "processed",
    );
    assert_eq!(w.stage("SHOP-50"), "analysis");
    w.push_analysis("SHOP-50");
    // After the fix, the stored delivery is re-driven (no source needed) and acts.
    let r = w.orch(&["ingest", "--replay", "r-2", "--json"]);
    let v = expect(&r, 0, "processed");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .starts_with("replay of event 2: "),
        "{v:#}"
    );
    assert_eq!(v["replay_of"], 2, "{v:#}");
    assert_eq!(w.stage("SHOP-50"), "architecture");
    assert_eq!(
        w.sql("SELECT count(*) FROM events WHERE delivery_id = 'r-2'"),
        "2"
    );

    // A rejected delivery is verified again with the current secret when replayed.
    let body = plane_issue(51, "To Analyse", "Rotated secret", &[]);
    let r = ingest_env(
        &w,
        "plane",
        &[
            ("X-Plane-Delivery", "r-3".into()),
            ("X-Plane-Signature", sign("rotated-secret", &body)),
        ],
        &body,
        &SECRETS,
    );
    expect(&r, 2, "rejected");
    let replay = |secret: &str| {
        w.orch_with(
            &["ingest", "plane", "--replay", "r-3", "--json"],
            &[(PLANE_VAR, secret)],
        )
    };
    let v = expect(&replay(PLANE_SECRET), 2, "rejected");
    assert!(
        v["reason"].as_str().unwrap().contains("bad signature"),
        "{v:#}"
    );
    assert_eq!(task_count(&w), "1");
    expect(&replay("rotated-secret"), 0, "processed");
    assert_eq!(w.stage("SHOP-51"), "analysis");

    // An unknown delivery id is a usage error.
    let r = w.orch(&["ingest", "--replay", "nope"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("no stored delivery `nope`"), "{r:?}");
}
