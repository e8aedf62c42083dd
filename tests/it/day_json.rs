//! The `--json` contract (issue 12, item 8): every command prints one object whose top-level
//! keys are exactly those `docs/json.md` lists for it, errors included.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::support::{Run, World, tempdir};

/// `docs/json.md`: `` - `orch <name>` … — keys: `a`, `b` `` lines, by name.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/json.md"))
        .expect("docs/json.md");
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("- `orch ") else {
            continue;
        };
        let Some((name, tail)) = rest.split_once('`') else {
            continue;
        };
        let Some((_, keys)) = tail.split_once("keys: ") else {
            continue;
        };
        let keys = keys
            .split(", ")
            .map(|k| k.trim().trim_matches('`').to_string())
            .collect();
        out.insert(name.to_string(), keys);
    }
    out
}

struct Checker {
    docs: BTreeMap<String, BTreeSet<String>>,
    seen: BTreeSet<String>,
}

impl Checker {
    /// `run` printed exactly the keys documented under `name`.
    #[track_caller]
    fn check(&mut self, name: &str, run: &Run) -> Value {
        let want = self
            .docs
            .get(name)
            .unwrap_or_else(|| panic!("`orch {name}` is not in docs/json.md"));
        let v: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| {
            panic!("orch {name}: stdout is not one JSON object ({e}): {run:?}")
        });
        let got: BTreeSet<String> = v
            .as_object()
            .unwrap_or_else(|| panic!("orch {name}: not an object: {run:?}"))
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            &got, want,
            "orch {name}: keys differ from docs/json.md\n{run:?}"
        );
        assert_eq!(v["schema_version"], 1, "{name}");
        self.seen.insert(name.to_string());
        v
    }
}

#[test]
fn every_command_prints_the_keys_docs_json_md_lists() {
    let w = World::with_repo_extra(
        "tests: { argv: [\"true\"] }\nstaging: { argv: [\"true\"] }\n\
         deploy: { mode: agent, require_confirm: true }",
    );
    let mut c = Checker {
        docs: documented(),
        seen: BTreeSet::new(),
    };
    let j = |args: &[&str]| {
        let mut a = args.to_vec();
        a.push("--json");
        w.orch(&a)
    };

    c.check(
        "task add",
        &j(&["task", "add", "--repo", "shop", "--title", "One"]),
    );
    c.check("task list", &j(&["task", "list"]));
    c.check("task show", &j(&["task", "show", "SHOP-1"]));
    c.check("queue", &j(&["queue"]));
    c.check("why", &j(&["why", "SHOP-1"]));
    c.check("logs", &j(&["logs", "SHOP-1"]));
    c.check("tick", &j(&["tick", "--plan"]));
    c.check("pause", &j(&["pause", "SHOP-1", "--reason", "look"]));
    c.check("resume", &j(&["resume", "SHOP-1"]));
    c.check("freeze", &j(&["freeze", "shop", "--reason", "calm"]));
    c.check("unfreeze", &j(&["unfreeze", "shop"]));
    c.check("approve", &j(&["approve", "SHOP-1"]));
    c.check("advance", &j(&["advance", "SHOP-1"]));
    c.check("lease list", &j(&["lease", "list"]));
    c.check("report overrides", &j(&["report", "overrides"]));
    c.check("report cost", &j(&["report", "cost", "--since", "7d"]));
    c.check("events", &j(&["events"]));
    c.check("outbox", &j(&["outbox"]));
    c.check("fsck", &j(&["fsck"]));
    c.check("doctor", &j(&["doctor"]));
    c.check("debug failpoints", &j(&["debug", "failpoints"]));
    // The supervisor, by hand: the default agent (`claude`) is not installed here, so the
    // attempt fails and is queued again; the object says so.
    c.check("job run", &j(&["job", "run", "1"]));
    w.sql("UPDATE jobs SET status = 'failed', finished_at = 1 WHERE id = 1");
    c.check("retry", &j(&["retry", "1"]));
    c.check("cancel", &j(&["cancel", "SHOP-1"]));

    let wi = w.walk_to_testing("Two");
    c.check("run-tests", &j(&["run-tests", &wi, "--no-advance"]));
    c.check("run-staging", &j(&["run-staging", &wi, "--no-advance"]));
    w.ok(
        &[
            "advance",
            &wi,
            "--to",
            "deploy",
            "--reason",
            "staging checked",
        ],
        0,
    );
    c.check("confirm-deploy", &j(&["confirm-deploy", &wi]));
    c.check("lease release", &j(&["lease", "release", &wi]));
    c.check(
        "lease release --merge",
        &j(&["lease", "release", "--merge", "shop"]),
    );

    let body = w.dir.path().join("body.json");
    std::fs::write(&body, "{}").unwrap();
    c.check(
        "ingest",
        &j(&["ingest", "plane", "--body", &body.display().to_string()]),
    );

    // Errors: usage (clap's and ours) and runtime, each the error object with its code.
    for (args, code) in [
        (vec!["why", "SHOP-99"], 2),
        (vec!["advance", "SHOP-1", "--reason", "x"], 2),
        (vec!["retry", "1"], 2),
    ] {
        let r = j(&args);
        assert_eq!(r.code, code, "{r:?}");
        let v = c.check("<any>", &r);
        assert_eq!(v["error"]["code"], code, "{v:#}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }

    let d = tempdir();
    let init_dir = d.path().join("fresh");
    let r = Run::of(
        std::process::Command::new(crate::support::orch_bin())
            .args(["init", "--json", "--dir"])
            .arg(&init_dir)
            .env_remove("ORCH_CONFIG")
            .env_remove("ORCH_STATE_DIR"),
    );
    c.check("init", &r);
    let r = Run::of(
        std::process::Command::new(crate::support::orch_bin())
            .args(["demo", "--json", "--dir"])
            .arg(d.path().join("demo"))
            .env_remove("ORCH_CONFIG")
            .env_remove("ORCH_STATE_DIR"),
    );
    let v = c.check("demo", &r);
    assert_eq!(v["reached_done"], true, "{v:#}");
    assert!(v["jobs"].as_array().is_some_and(|a| !a.is_empty()), "{v:#}");
    // The demo opts in to the last mile: the task's work is merged into the remote's main.
    let log = std::process::Command::new("git")
        .arg("-C")
        .arg(d.path().join("demo/remote.git"))
        .args(["log", "--format=%s", "main"])
        .output()
        .expect("git log");
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(log.contains("DEMO-1: developer"), "{log}");
    assert!(log.contains("(merged by orch)"), "{log}");

    let missing: Vec<&String> = c.docs.keys().filter(|k| !c.seen.contains(*k)).collect();
    assert!(
        missing.is_empty(),
        "documented but not checked: {missing:?}"
    );
}
