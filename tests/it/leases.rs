//! Transition and merge leases (SPEC §5.2): a live owner blocks a release and makes `advance`
//! defer; a dead, zombie or recycled owner is reclaimed on sight; two concurrent advances move
//! the stage exactly once.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{World, boot_id, now, procs, wait_output, wait_until};

/// `(state, start time)` of `pid`, or `None` when it is gone.
fn stat(pid: u32) -> Option<(char, u64)> {
    procs::stat(pid as i32).map(|s| (s.state, s.start))
}

/// A child killed and reaped when the test ends, however it ends.
struct Kid(Child);

impl Kid {
    fn spawn(program: &str, args: &[&str]) -> Kid {
        Kid(Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {program}: {e}")))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How long a child may take to exit or become a zombie.
const WAIT: Duration = Duration::from_secs(10);

fn insert_lease(w: &World, wi: &str, pid: u32, start: u64, boot: &str) {
    let tid = w.task_id(wi);
    w.sql(&format!(
        "INSERT INTO transition_lease (task_id, owner_kind, pid, start_time, boot_id, stage, \
         acquired_at) VALUES ({tid}, 'supervisor', {pid}, {start}, '{boot}', 'analysis', {})",
        now() - 60
    ));
}

fn lease_rows(w: &World) -> String {
    w.sql("SELECT count(*) FROM transition_lease")
}

#[test]
fn a_live_owner_blocks_release_without_force() {
    let w = World::new();
    w.add("First", &[]);
    let owner = Kid::spawn("sleep", &["30"]);
    let pid = owner.pid();
    let (state, start) = stat(pid).expect("sleep is running");
    assert_ne!(state, 'Z');
    insert_lease(&w, "SHOP-1", pid, start, &boot_id());

    let r = w.ok(&["lease", "release", "SHOP-1"], 4);
    assert!(r.stderr.contains(&format!("pid {pid}")), "{r:?}");
    assert!(r.stderr.contains("--force"), "{r:?}");
    assert_eq!(lease_rows(&w), "1");

    let list = w.ok(&["lease", "list", "--json"], 0).json();
    let t = &list["transition"][0];
    assert_eq!(t["alive"], true, "{list:#}");
    assert_eq!(t["pid"], pid);
    assert_eq!(t["work_item"], "SHOP-1");
    assert_eq!(t["owner_kind"], "supervisor");
    let text = w.ok(&["lease", "list"], 0);
    assert!(
        text.stdout.contains(&format!("pid {pid} is alive")),
        "{text:?}"
    );
    let q = w.ok(&["queue", "--json"], 0).json();
    assert_eq!(q["leases"]["transition"][0]["alive"], true, "{q:#}");

    // advance defers to the live owner, names it, changes no stage.
    let r = w.ok(&["advance", "SHOP-1", "--json"], 4);
    let j = r.json();
    assert_eq!(j["outcome"], "deferred", "{r:?}");
    let reason = j["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("pid {pid}")) && reason.contains("transition lease held by"),
        "{reason}"
    );
    assert_eq!(w.stage("SHOP-1"), "analysis");
    assert_eq!(lease_rows(&w), "1", "the owner's lease stays");
    assert_eq!(
        w.sql("SELECT count(*) FROM transitions WHERE outcome = 'deferred'"),
        "1"
    );
    // A dry run does not touch the lease at all.
    w.ok(&["advance", "SHOP-1", "--dry-run"], 3);

    let r = w.ok(&["lease", "release", "SHOP-1", "--force"], 0);
    assert!(r.stdout.contains("force-released"), "{r:?}");
    assert!(r.stdout.contains(&format!("pid {pid}")), "{r:?}");
    assert_eq!(lease_rows(&w), "0");
    let mut owner = owner;
    assert!(
        owner.0.try_wait().unwrap().is_none(),
        "releasing a lease must not kill its owner"
    );
    let r = w.ok(&["lease", "release", "SHOP-1"], 0);
    assert!(r.stdout.contains("not held"), "{r:?}");
}

#[test]
fn dead_zombie_and_reused_owners_are_reclaimed() {
    let w = World::new();
    w.add("First", &[]);
    let boot = boot_id();

    // A pid that no longer exists: spawn, read, kill and reap.
    let mut gone = Command::new("sleep").arg("30").spawn().unwrap();
    let gone_pid = gone.id();
    let (_, gone_start) = stat(gone_pid).unwrap();
    gone.kill().unwrap();
    gone.wait().unwrap();
    wait_until("the reaped pid is gone", WAIT, || stat(gone_pid).is_none());

    // A zombie: a child that exited and that we do not wait for (yet).
    let zombie = Kid::spawn("true", &[]);
    let zombie_pid = zombie.pid();
    wait_until("the child is a zombie", WAIT, || {
        stat(zombie_pid).is_some_and(|(s, _)| s == 'Z')
    });
    let (_, zombie_start) = stat(zombie_pid).unwrap();

    // A live pid whose start time differs from the recorded one: ourselves, recorded "earlier".
    let me = std::process::id();
    let (_, my_start) = stat(me).unwrap();

    let cases = [
        ("gone", gone_pid, gone_start, "is gone"),
        ("zombie", zombie_pid, zombie_start, "zombie"),
        ("reused", me, my_start + 1, "reused"),
    ];
    for (name, pid, start, says) in cases {
        insert_lease(&w, "SHOP-1", pid, start, &boot);
        let list = w.ok(&["lease", "list", "--json"], 0).json();
        assert_eq!(list["transition"][0]["alive"], false, "{name}: {list:#}");
        assert!(
            list["transition"][0]["liveness"]
                .as_str()
                .unwrap()
                .contains(says),
            "{name}: {list:#}"
        );
        let r = w.ok(&["lease", "release", "SHOP-1"], 0);
        assert!(r.stdout.contains(says), "{name}: {r:?}");
        assert!(r.stdout.contains(&format!("pid {pid}")), "{name}: {r:?}");
        assert_eq!(lease_rows(&w), "0", "{name}");

        // advance reclaims the dead owner's lease on sight and goes on to the gate (which says
        // no: the analysis files are missing), then releases its own lease.
        insert_lease(&w, "SHOP-1", pid, start, &boot);
        let r = w.ok(&["advance", "SHOP-1", "--json"], 3);
        let j = r.json();
        assert_eq!(j["outcome"], "not-satisfied", "{name}: {r:?}");
        assert_eq!(lease_rows(&w), "0", "{name}: lease left behind");
    }

    // An owner recorded on another boot is dead whatever its pid says.
    insert_lease(
        &w,
        "SHOP-1",
        me,
        my_start,
        "00000000-0000-0000-0000-000000000000",
    );
    let r = w.ok(&["lease", "release", "SHOP-1"], 0);
    assert!(r.stdout.contains("another boot"), "{r:?}");
    assert_eq!(
        w.sql("SELECT count(*) FROM transitions WHERE outcome = 'deferred'"),
        "0"
    );
    drop(zombie);
}

/// add → analysis files → approve (→ architecture) → ADR pushed: the architecture gate is green.
fn at_green_architecture_gate() -> World {
    let w = World::new();
    w.add("Race me", &[]);
    w.push_analysis("SHOP-1");
    w.ok(&["approve", "SHOP-1"], 0);
    assert_eq!(w.stage("SHOP-1"), "architecture");
    w.push_adr("SHOP-1");
    w
}

#[test]
fn two_advances_at_once_move_the_stage_once() {
    for round in 0..5 {
        let w = at_green_architecture_gate();
        let args = [
            "advance",
            "SHOP-1",
            "--expect-stage",
            "architecture",
            "--json",
        ];
        let a = w
            .orch_cmd(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let b = w
            .orch_cmd(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let runs = [wait_output(a), wait_output(b)];
        let outcomes: Vec<(i32, String)> = runs
            .iter()
            .map(|r| (r.code, r.json()["outcome"].as_str().unwrap().to_string()))
            .collect();
        let winners = outcomes
            .iter()
            .filter(|(c, o)| *c == 0 && o == "advanced")
            .count();
        let losers = outcomes
            .iter()
            .filter(|(c, o)| *c == 4 && (o == "deferred" || o == "stage-cas-lost"))
            .count();
        assert_eq!(
            (winners, losers),
            (1, 1),
            "round {round}: {outcomes:?}\n{:?}\n{:?}",
            runs[0],
            runs[1]
        );
        assert_eq!(w.stage("SHOP-1"), "development", "round {round}");
        assert_eq!(
            w.sql("SELECT count(*) FROM jobs WHERE role = 'developer'"),
            "1",
            "round {round}"
        );
        assert_eq!(
            w.sql("SELECT count(*) FROM jobs WHERE role = 'developer' AND status = 'queued'"),
            "1",
            "round {round}"
        );
        assert_eq!(
            w.sql(
                "SELECT count(*) FROM transitions WHERE outcome = 'advanced' \
                 AND from_stage = 'architecture'"
            ),
            "1",
            "round {round}"
        );
        assert_eq!(
            w.sql("SELECT count(*) FROM jobs WHERE role = 'architect' AND status = 'queued'"),
            "0",
            "round {round}: the architect job was superseded"
        );
        assert_eq!(
            lease_rows(&w),
            "0",
            "round {round}: a lease was left behind"
        );

        // A latecomer that still expects `architecture` loses the compare-and-swap, changes
        // nothing and says so.
        let n = w.sql("SELECT count(*) FROM jobs");
        let r = w.ok(&args, 4);
        assert_eq!(r.json()["outcome"], "stage-cas-lost", "{r:?}");
        assert_eq!(w.stage("SHOP-1"), "development");
        assert_eq!(w.sql("SELECT count(*) FROM jobs"), n);
    }
}

#[test]
fn merge_lease_release() {
    let w = World::new();
    w.add("First", &[]);
    let tid = w.task_id("SHOP-1");
    let boot = boot_id();
    let mut dead = Command::new("sleep").arg("30").spawn().unwrap();
    let dead_pid = dead.id();
    let (_, dead_start) = stat(dead_pid).unwrap();
    dead.kill().unwrap();
    dead.wait().unwrap();
    wait_until("the reaped pid is gone", WAIT, || stat(dead_pid).is_none());
    let insert = |pid: u32, start: u64| {
        w.sql(&format!(
            "INSERT INTO merge_lease (repo, task_id, owner_kind, pid, start_time, boot_id, \
             acquired_at) VALUES ('shop', {tid}, 'merge', {pid}, {start}, '{boot}', {})",
            now()
        ));
    };

    insert(dead_pid, dead_start);
    let list = w.ok(&["lease", "list", "--json"], 0).json();
    assert_eq!(list["merge"][0]["repo"], "shop", "{list:#}");
    assert_eq!(list["merge"][0]["alive"], false, "{list:#}");
    let r = w.ok(&["lease", "release", "--merge", "shop"], 0);
    assert!(r.stdout.contains("is gone"), "{r:?}");
    assert_eq!(w.sql("SELECT count(*) FROM merge_lease"), "0");
    let r = w.ok(&["lease", "release", "--merge", "shop"], 0);
    assert!(r.stdout.contains("not held"), "{r:?}");

    // A live owner (ourselves) needs --force.
    let me = std::process::id();
    insert(me, stat(me).unwrap().1);
    let r = w.ok(&["lease", "release", "--merge", "shop"], 4);
    assert!(
        r.stderr.contains(&format!("pid {me}")) && r.stderr.contains("--force"),
        "{r:?}"
    );
    assert_eq!(w.sql("SELECT count(*) FROM merge_lease"), "1");
    w.ok(&["lease", "release", "--merge", "shop", "--force"], 0);
    assert_eq!(w.sql("SELECT count(*) FROM merge_lease"), "0");

    let r = w.ok(&["lease", "release", "--merge", "nope"], 2);
    assert!(r.stderr.contains("unknown repo"), "{r:?}");
    w.ok(&["lease", "release"], 2);
    w.ok(&["lease", "release", "SHOP-1", "--merge", "shop"], 2);
}

/// A lease held by `orch serve` whose best-effort release failed was never reclaimed: its owner
/// stays alive. A long-lived owner's lease expires unless renewed; an expired one is reclaimed
/// by the tick and taken over by the next advance, though its owner lives on.
#[test]
fn an_expired_lease_of_a_live_owner_is_reclaimed() {
    let w = World::new();
    w.add("First", &[]);
    let owner = Kid::spawn("sleep", &["30"]);
    let (_, start) = stat(owner.pid()).unwrap();
    insert_lease(&w, "SHOP-1", owner.pid(), start, &boot_id());
    let tid = w.task_id("SHOP-1");
    // Not expired yet: held.
    w.sql(&format!(
        "UPDATE transition_lease SET expires_at = {} WHERE task_id = {tid}",
        now() + 600
    ));
    let r = w.orch(&["advance", "SHOP-1"]);
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(lease_rows(&w), "1");
    // Expired: the tick reclaims it, and `lease list` says why.
    w.sql(&format!(
        "UPDATE transition_lease SET expires_at = {} WHERE task_id = {tid}",
        now() - 1
    ));
    let list = w.ok(&["lease", "list"], 0);
    assert!(list.stdout.contains("expired"), "{list:?}");
    let tick = w.ok(&["tick"], 0);
    assert!(
        tick.stdout.contains("reclaim transition lease of SHOP-1"),
        "{tick:?}"
    );
    assert_eq!(lease_rows(&w), "0");
}
