//! The first integration check: a task is added and shows up where an operator looks.

use crate::support;

#[test]
fn added_task_is_in_analysis_with_one_queued_analyst_job() {
    let w = support::World::new();
    let wi = w.add("Add a health endpoint", &[]);
    assert_eq!(wi, "SHOP-1");
    let show = w.ok(&["task", "show", &wi, "--json"], 0).json();
    assert_eq!(show["stage"], "analysis");
    assert_eq!(show["branch"], "feature/SHOP-1-add-a-health-endpoint");
    let jobs = show["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["role"], "analyst");
    assert_eq!(jobs[0]["status"], "queued");
    assert_eq!(w.sql("SELECT count(*) FROM tasks"), "1");
}
