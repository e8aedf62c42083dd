//! `orch lease list`, `orch lease release <WI> [--force]`, `orch lease release --merge <repo> [--force]`.

use anyhow::Result;
use serde::Serialize;

use crate::cli::LeaseCmd;
use crate::ctx::Ctx;
use crate::db;
use crate::error::{Code, usage};
use crate::ops::lease::{self, ReleaseTarget};
use crate::ops::queue::{LeaseOut, lease_out};
use crate::output;

#[derive(Serialize)]
struct LeaseList {
    schema_version: u32,
    transition: Vec<LeaseOut>,
    merge: Vec<LeaseOut>,
}

fn rows(v: &[LeaseOut]) -> Vec<Vec<String>> {
    v.iter()
        .map(|l| {
            vec![
                l.work_item.clone().unwrap_or_else(|| "-".into()),
                l.repo.clone(),
                l.owner_kind.clone(),
                l.pid.to_string(),
                l.acquired_at.clone(),
                l.liveness.clone(),
            ]
        })
        .collect()
}

pub fn run(ctx: &mut Ctx, cmd: LeaseCmd) -> Result<Code> {
    match cmd {
        LeaseCmd::List => {
            let c = ctx.db.conn();
            let list = LeaseList {
                schema_version: 1,
                transition: lease::view(db::leases::transition_all(c)?, ctx.now)
                    .iter()
                    .map(lease_out)
                    .collect(),
                merge: lease::view_merge(c, db::leases::merge_all(c)?, ctx.now)?
                    .iter()
                    .map(lease_out)
                    .collect(),
            };
            if ctx.json {
                output::json(&list);
            } else {
                let h = ["work item", "repo", "owner", "pid", "since", "liveness"];
                output::table(
                    Some("transition leases"),
                    &h,
                    rows(&list.transition),
                    "none",
                );
                output::table(Some("merge leases"), &h, rows(&list.merge), "none");
            }
            Ok(Code::Ok)
        }
        LeaseCmd::Release {
            work_item,
            merge,
            force,
        } => {
            let target = match (&work_item, &merge) {
                (Some(w), None) => ReleaseTarget::Task(w),
                (None, Some(r)) => ReleaseTarget::Merge(r),
                _ => {
                    return Err(usage("name a work item, or a repo with `--merge REPO`"));
                }
            };
            let msg = lease::release(ctx, target, force)?;
            let subject = match (&work_item, &merge) {
                (Some(w), _) => ("work_item", w.as_str()),
                (_, Some(r)) => ("merge_repo", r.as_str()),
                (None, None) => ("work_item", ""),
            };
            Ok(super::print_change(ctx.json, subject, true, &msg))
        }
    }
}
