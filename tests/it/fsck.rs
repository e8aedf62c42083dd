//! `orch fsck` (design §12): read-only, exit 0 on a clean state, 5 with violations, each named
//! with the command that repairs it; the tick repairs what it owns.

use crate::support::{World, boot_id, now};

#[test]
fn fsck_names_broken_invariants_with_their_fix_and_the_tick_repairs_its_own() {
    let w = World::new();
    w.add("First", &[]);
    w.add("Second", &[]);
    let clean = w.orch(&["fsck"]);
    assert_eq!(clean.code, 0, "{clean:?}");
    assert!(clean.stdout.starts_with("clean:"), "{clean:?}");

    let t1 = w.task_id("SHOP-1");
    let t2 = w.task_id("SHOP-2");
    let t = now();
    // A lease of a process that is gone, a running job whose supervisor was never recorded, a
    // stage the history does not explain, and a queued job of a finished task.
    w.sql(&format!(
        "INSERT INTO transition_lease (task_id, owner_kind, pid, start_time, boot_id, stage, \
         acquired_at) VALUES ({t1}, 'advance', 999999, 1, '{}', 'analysis', {t})",
        boot_id()
    ));
    w.sql(&format!(
        "UPDATE jobs SET status = 'running', attempts = 1, started_at = {} WHERE task_id = {t1}",
        t - 3600
    ));
    w.sql(&format!(
        "UPDATE tasks SET stage = 'review' WHERE id = {t1}"
    ));
    w.sql(&format!("UPDATE tasks SET stage = 'done' WHERE id = {t2}"));
    let before = w.sql("SELECT count(*) FROM jobs WHERE status = 'queued'");

    let r = w.orch(&["fsck", "--json"]);
    assert_eq!(r.code, 5, "{r:?}");
    let v = r.json();
    assert_eq!(v["clean"], false);
    let checks: Vec<&str> = v["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["check"].as_str().unwrap())
        .collect();
    for want in [
        "lease-of-dead-owner",
        "running-job-without-supervisor",
        "stage-not-last-hop",
        "queued-job-of-finished-task",
    ] {
        assert!(checks.contains(&want), "{want} missing: {v:#}");
    }
    for x in v["violations"].as_array().unwrap() {
        assert!(!x["fix"].as_str().unwrap().is_empty(), "{x:#}");
    }
    // Read-only: nothing changed.
    assert_eq!(
        w.sql("SELECT count(*) FROM jobs WHERE status = 'queued'"),
        before
    );
    assert_eq!(w.sql("SELECT count(*) FROM transition_lease"), "1");
    let text = w.orch(&["fsck"]);
    assert_eq!(text.code, 5);
    assert!(
        text.stdout.contains("fix: `orch lease release SHOP-1`"),
        "{text:?}"
    );

    // The tick reclaims the lease, reaps the job and cancels the stray queued one.
    for _ in 0..2 {
        assert_eq!(w.orch(&["tick"]).code, 0);
    }
    let after = w.orch(&["fsck", "--json"]).json();
    let left: Vec<&str> = after["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["check"].as_str().unwrap())
        .collect();
    assert!(!left.contains(&"lease-of-dead-owner"), "{after:#}");
    assert!(
        !left.contains(&"running-job-without-supervisor"),
        "{after:#}"
    );
    assert!(!left.contains(&"queued-job-of-finished-task"), "{after:#}");
}
