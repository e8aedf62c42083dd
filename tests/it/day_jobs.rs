//! Following and fixing jobs (issue 12, items 3–6): `orch logs`, a streaming agent that the
//! inactivity timeout leaves alone, what the agents cost and the budget, and `orch retry` for a
//! job that failed for good.

use crate::support::sched::{Cfg, DEADLINE, Sched, tick_until, wait_until};
use crate::support::{Run, transitions};

/// The stub, asked for `--output-format` `format` as orch's default argv asks the real agent.
fn with_format(w: &Sched, format: &str) {
    let text = std::fs::read_to_string(&w.config).unwrap();
    let text = text.replacen(
        "\"--print\"]",
        &format!("\"--print\", \"--output-format\", \"{format}\"]"),
        1,
    );
    assert!(text.contains(format), "{text}");
    std::fs::write(&w.config, text).unwrap();
}

/// A stream-json agent that works longer than the inactivity timeout, saying something every
/// second, is not killed; the same agent printing only its final JSON is (the defect: the old
/// default `--output-format json` said nothing until the end).
#[test]
fn a_streaming_agent_outlives_the_inactivity_timeout_and_its_usage_is_parsed() {
    let w = Sched::new(Cfg {
        inactivity_timeout_s: 2,
        max_attempts: 1,
        ..Cfg::default()
    });
    with_format(&w, "stream-json");
    let wi = w.add("Long healthy run", &[]);
    let env = [("STUB_SLEEP", "4")];
    tick_until(&w, &env, |w| w.job_done(&wi, "analyst"), DEADLINE);
    let show = w.show(&wi);
    let total = &show["cost"]["total"];
    assert_eq!(total["runs"], 1, "{show:#}");
    assert_eq!(
        total["cost_usd"], 0.0123,
        "the result event's cost: {show:#}"
    );
    assert_eq!(total["input_tokens"], 1200, "{show:#}");
    assert_eq!(show["cost"]["stages"][0]["stage"], "analysis", "{show:#}");
    let agent_log = std::fs::read_to_string(w.state_dir().join(format!(
        "logs/job-{}.agent.log",
        w.job(&wi, "analyst").unwrap().id
    )))
    .unwrap();
    assert!(agent_log.contains("\"type\":\"assistant\""), "{agent_log}");

    let w = Sched::new(Cfg {
        inactivity_timeout_s: 2,
        max_attempts: 1,
        ..Cfg::default()
    });
    with_format(&w, "json");
    let wi = w.add("Long silent run", &[]);
    w.tick(&env);
    wait_until(
        &w,
        "the silent agent is killed",
        |w| w.job(&wi, "analyst").is_some_and(|j| j.status == "failed"),
        DEADLINE,
    );
    assert!(
        w.job_error(w.job(&wi, "analyst").unwrap().id)
            .contains("inactiv"),
        "{}",
        w.diagnose()
    );
}

/// The breaker still opens only on the structured result, in stream-json as in json.
#[test]
fn in_stream_json_the_breaker_reads_only_the_result_event() {
    let w = Sched::new(Cfg {
        max_attempts: 2,
        usage_limit_backoff_s: 3600,
        ..Cfg::default()
    });
    with_format(&w, "stream-json");
    let wi = w.add("Talks about limits", &[]);
    w.tick(&[
        ("STUB_EXIT", "analyst:1"),
        ("STUB_SAY", "Claude AI usage limit reached|1767225600"),
    ]);
    wait_until(
        &w,
        "the failed attempt is recorded",
        |w| {
            w.job(&wi, "analyst")
                .is_some_and(|j| j.status != "running" && j.attempts == 1)
        },
        DEADLINE,
    );
    assert!(w.queue()["breaker"].is_null());

    let w = Sched::new(Cfg {
        usage_limit_backoff_s: 3600,
        ..Cfg::default()
    });
    with_format(&w, "stream-json");
    w.add("Hits the limit", &[]);
    w.tick(&[("STUB_USAGE_LIMIT", "analyst:1")]);
    wait_until(
        &w,
        "the usage-limit result opens the breaker",
        |w| !w.queue()["breaker"].is_null(),
        DEADLINE,
    );
}

#[test]
fn logs_follows_a_running_job_to_its_end_and_queue_shows_where_it_logs() {
    let w = Sched::new(Cfg::default());
    with_format(&w, "stream-json");
    let wi = w.add("Follow me", &[]);
    w.tick(&[("STUB_SLEEP", "3")]);
    let id = w.job(&wi, "analyst").unwrap().id;
    wait_until(
        &w,
        "the job runs",
        |w| w.job(&wi, "analyst").is_some_and(|j| j.status == "running"),
        DEADLINE,
    );
    let q = w.queue();
    let running = &q["running"][0];
    assert!(running["elapsed_s"].is_number(), "{q:#}");
    assert!(
        running["log"]
            .as_str()
            .unwrap()
            .ends_with(&format!("logs/job-{id}.log")),
        "{q:#}"
    );
    let text = w.ok(&["queue"], 0).stdout;
    assert!(text.contains("running for"), "{text}");
    let why = w.ok(&["why", &wi], 0).stdout;
    assert!(why.contains(&format!("orch logs {id} -f")), "{why}");
    let show = w.show(&wi);
    assert!(show["jobs"][0]["elapsed_s"].is_number(), "{show:#}");

    // Follow by work item until the job ends; the exit code is its outcome.
    let r = Run::of(&mut w.stub_cmd(&["logs", &wi, "-f", "--agent", "--raw"]));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("\"type\":\"result\""), "{r:?}");
    assert!(r.stderr.contains("is done"), "{r:?}");
    let r = w.ok(&["logs", &id.to_string(), "--json"], 0).json();
    assert_eq!(r["status"], "done", "{r:#}");
    assert!(r["text"].as_str().unwrap().contains("launching the agent") || r["exists"] == true);
    // `-n` keeps the last lines only (there was no `--tail` before).
    let all = w.ok(&["logs", &id.to_string()], 0).stdout;
    let last = w.ok(&["logs", &id.to_string(), "-n", "2"], 0).stdout;
    assert!(all.lines().count() > 2, "{all}");
    assert_eq!(
        last.lines().collect::<Vec<_>>(),
        all.lines()
            .rev()
            .take(2)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
    );
    // Unknown jobs are bad usage.
    assert_eq!(w.orch(&["logs", "999"]).code, 2);
}

#[test]
fn a_task_over_its_budget_is_held_with_the_reason_and_report_cost_sums_it() {
    let w = Sched::new(Cfg::default());
    // The stub's analyst costs $0.0123: a second run of that size would pass $0.02.
    let text = std::fs::read_to_string(&w.config).unwrap();
    std::fs::write(
        &w.config,
        text.replacen("agent:\n", "agent:\n  budget_usd: 0.02\n", 1),
    )
    .unwrap();
    let wi = w.add("Expensive", &[]);
    tick_until(
        &w,
        &[],
        |w| w.show(&wi)["held_reason"].is_string(),
        DEADLINE,
    );
    let show = w.show(&wi);
    let reason = show["held_reason"].as_str().unwrap();
    assert!(
        reason.contains("budget") && reason.contains("$0.02"),
        "{reason}"
    );
    assert_eq!(w.stage(&wi), "architecture");
    assert!(transitions(&show).iter().any(|t| t["outcome"] == "held"));
    assert_eq!(show["cost"]["budget_usd"], 0.02);
    let q = w.queue();
    assert_eq!(q["tasks"][0]["cost_usd"], 0.0123, "{q:#}");
    assert!(w.ok(&["queue"], 0).stdout.contains("$0.01"));
    let rep = w.ok(&["report", "cost", "--json"], 0).json();
    assert_eq!(rep["tasks"][0]["work_item"], wi.as_str(), "{rep:#}");
    assert_eq!(rep["total"]["cost_usd"], 0.0123, "{rep:#}");
    // The stage the money was spent in, not the task's stage now (it said `architecture`).
    assert_eq!(rep["tasks"][0]["stage"], "analysis", "{rep:#}");
    let rep = w
        .ok(&["report", "cost", "--since", "1h", "--repo", "shop"], 0)
        .stdout;
    assert!(rep.contains(&wi) && rep.contains("total"), "{rep}");
    assert_eq!(w.orch(&["report", "cost", "--since", "soon"]).code, 2);
}

#[test]
fn a_job_that_failed_for_good_is_flagged_and_retried_by_hand() {
    let w = Sched::new(Cfg {
        max_attempts: 1,
        ..Cfg::default()
    });
    let wi = w.add("Fails once", &[]);
    let fail = [("STUB_EXIT", "analyst:3")];
    w.tick(&fail);
    let id = w.job(&wi, "analyst").unwrap().id;
    wait_until(
        &w,
        "the job failed for good",
        |w| w.job(&wi, "analyst").is_some_and(|j| j.status == "failed"),
        DEADLINE,
    );
    // The supervisor's alert reached only its job log; the next tick repeats it, once.
    let r = w.tick(&[]);
    assert!(
        r.stderr.contains("WARN")
            && r.stderr.contains("alert: job")
            && r.stderr.contains("failed after 1 attempts"),
        "{r:?}"
    );
    let r = w.tick(&[]);
    assert!(!r.stderr.contains("alert:"), "relayed twice: {r:?}");
    let list = w.ok(&["task", "list", "--json"], 0).json();
    assert_eq!(list["tasks"][0]["flags"][0], "failed", "{list:#}");
    assert!(w.ok(&["task", "list"], 0).stdout.contains("failed"));
    let failed = w.ok(&["task", "list", "--failed", "--json"], 0).json();
    assert_eq!(failed["tasks"].as_array().unwrap().len(), 1);
    let q = w.queue();
    assert_eq!(q["tasks"][0]["flags"][0], "failed", "{q:#}");
    let r = w.ok(&["resume", &wi], 0);
    assert!(r.stdout.contains(&format!("orch retry {id}")), "{r:?}");
    let why = w.ok(&["why", &wi], 0).stdout;
    assert!(why.contains(&format!("orch retry {id}")), "{why}");

    let r = w.orch_with(&["retry", &wi, "--json"], &[("SUDO_USER", "dana")]);
    assert_eq!(r.code, 0, "{r:?}");
    let j = w.job(&wi, "analyst").unwrap();
    assert_eq!((j.status.as_str(), j.attempts), ("queued", 0), "{j:?}");
    let show = w.show(&wi);
    let last = transitions(&show).last().unwrap().clone();
    assert_eq!(
        (last["outcome"].as_str(), last["by"].as_str()),
        (Some("retried"), Some("dana"))
    );
    // A second retry has nothing to do.
    assert_eq!(w.orch(&["retry", &id.to_string()]).code, 2);
    tick_until(&w, &[], |w| w.job_done(&wi, "analyst"), DEADLINE);
    assert_eq!(
        w.job(&wi, "analyst").unwrap().id,
        id,
        "the same job ran again"
    );
}

#[test]
fn doctor_agent_runs_the_agent_once_and_reports_its_result_and_cost() {
    let w = Sched::new(Cfg::default());
    with_format(&w, "stream-json");
    let r = Run::of(&mut w.stub_cmd(&["doctor", "--agent", "--json"]));
    let v = r.json();
    let probe = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "agent.probe")
        .unwrap_or_else(|| panic!("{v:#}"))
        .clone();
    assert_eq!(probe["status"], "ok", "{probe:#}");
    assert!(
        probe["detail"].as_str().unwrap().contains("$0.0614"),
        "{probe:#}"
    );
    // An agent that prints no result event fails the probe, naming the fix.
    let text = std::fs::read_to_string(&w.config).unwrap();
    let stub = crate::support::stub_agent().display().to_string();
    std::fs::write(&w.config, text.replace(&format!("{stub:?}"), "\"true\"")).unwrap();
    let r = w.orch(&["doctor", "--agent"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.contains("without a `result` event"), "{r:?}");
}

#[test]
fn a_task_waiting_for_its_approval_is_flagged() {
    let w = Sched::new(Cfg {
        auto_approve: false,
        ..Cfg::default()
    });
    let wi = w.add("Needs a human", &[]);
    tick_until(&w, &[], |w| w.job_done(&wi, "analyst"), DEADLINE);
    let list = w.ok(&["task", "list", "--json"], 0).json();
    assert_eq!(
        list["tasks"][0]["flags"],
        serde_json::json!(["awaiting-approval"]),
        "{list:#}"
    );
    let q = w.queue();
    assert_eq!(
        q["tasks"][0]["flags"],
        serde_json::json!(["awaiting-approval"]),
        "{q:#}"
    );
    assert!(w.ok(&["queue"], 0).stdout.contains("awaiting-approval"));
}
