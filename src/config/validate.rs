//! The value checks serde's types cannot express, run once on load: every message names the
//! key and the file. It checks types and values, never whether programs, remotes or services
//! exist (that is `orch doctor`'s job).

use std::collections::HashSet;

use anyhow::Result;

use super::types::*;
use crate::domain::ids::valid_prefix;
use crate::domain::names::{valid_branch_name, valid_repo_name};
use crate::error::usage;
use crate::ext::gitea::ForgeRepo;

/// Value checks that serde's types cannot express. Every message names the key.
pub(super) fn validate(cfg: &Config) -> Result<()> {
    let file = cfg
        .file
        .as_ref()
        .map(|f| f.display().to_string())
        .unwrap_or_else(|| "<defaults>".into());
    let bad = |key: String, why: String| usage(format!("invalid config `{file}`: {key}: {why}"));

    if cfg.max_concurrency == 0 {
        return Err(bad("max_concurrency".into(), "must be at least 1".into()));
    }
    if cfg.agent.argv.is_empty() || cfg.agent.argv[0].trim().is_empty() {
        return Err(bad(
            "agent.argv".into(),
            "must name a program to run".into(),
        ));
    }
    // A zero would kill every run at once (or never try it).
    let at_least_one = |key: String, v: u64| {
        if v == 0 {
            Err(bad(key, "must be at least 1".into()))
        } else {
            Ok(())
        }
    };
    at_least_one(
        "agent.inactivity_timeout_s".into(),
        cfg.agent.inactivity_timeout_s,
    )?;
    at_least_one("agent.max_attempts".into(), cfg.agent.max_attempts.into())?;
    if let Some(b) = cfg.agent.budget_usd
        && !(b.is_finite() && b > 0.0)
    {
        return Err(bad(
            "agent.budget_usd".into(),
            "must be a positive number of US dollars".into(),
        ));
    }
    at_least_one(
        "scheduler.reaper_max_running_s".into(),
        cfg.scheduler.reaper_max_running_s,
    )?;
    at_least_one("git.timeout_s".into(), cfg.git.timeout_s)?;
    at_least_one("git.lock_timeout_s".into(), cfg.git.lock_timeout_s)?;
    let agent_role = |key: String, role: &str| -> Result<()> {
        match role.parse::<crate::domain::stage::Role>() {
            Ok(r) if r.is_agent() => Ok(()),
            Ok(r) => Err(bad(
                key,
                format!("`{r}` is run by orch itself, never by an agent"),
            )),
            Err(e) => Err(bad(key, e.to_string())),
        }
    };
    for (role, rc) in cfg.agent.roles.iter() {
        agent_role(format!("agent.roles.{role}"), role)?;
        if let Some(t) = rc.timeout_s {
            at_least_one(format!("agent.roles.{role}.timeout_s"), t)?;
        }
    }
    let mut names = HashSet::new();
    let mut prefixes = HashSet::new();
    for (i, r) in cfg.repos.iter().enumerate() {
        let key = |k: &str| format!("repos[{i}].{k}");
        if !valid_repo_name(&r.name) {
            return Err(bad(
                key("name"),
                format!(
                    "`{}` must match ^[a-z0-9][a-z0-9._-]{{0,63}}$",
                    crate::domain::ids::printable(&r.name)
                ),
            ));
        }
        if !names.insert(r.name.clone()) {
            return Err(bad(key("name"), format!("`{}` is used twice", r.name)));
        }
        if !valid_prefix(&r.prefix) {
            return Err(bad(
                key("prefix"),
                format!(
                    "`{}` must be upper-case letters and digits, like `SHOP`",
                    crate::domain::ids::printable(&r.prefix)
                ),
            ));
        }
        if !prefixes.insert(r.prefix.clone()) {
            return Err(bad(key("prefix"), format!("`{}` is used twice", r.prefix)));
        }
        if r.remote.trim().is_empty() || r.remote.starts_with('-') {
            return Err(bad(key("remote"), "must be a git URL or a path".into()));
        }
        if !valid_branch_name(&r.main) {
            return Err(bad(
                key("main"),
                format!("`{}` is not a valid branch name", r.main),
            ));
        }
        if let Some(f) = &r.forge_repo
            && ForgeRepo::parse(f).is_none()
        {
            return Err(bad(key("forge_repo"), "must be `owner/name`".into()));
        }
        if r.ci.mode == CiMode::Command && r.ci.argv.is_empty() {
            return Err(bad(
                key("ci.argv"),
                "is required when ci.mode is `command`".into(),
            ));
        }
        if let Some(t) = &r.tests {
            if t.argv.is_empty() {
                return Err(bad(key("tests.argv"), "must name a program to run".into()));
            }
            if t.timeout_s == 0 {
                return Err(bad(key("tests.timeout_s"), "must be at least 1".into()));
            }
        }
        if let Some(s) = &r.staging {
            if s.argv.is_empty() {
                return Err(bad(
                    key("staging.argv"),
                    "must name a program to run".into(),
                ));
            }
            if s.timeout_s == 0 {
                return Err(bad(key("staging.timeout_s"), "must be at least 1".into()));
            }
        }
        if let Some(c) = &r.coverage {
            if r.merge.is_none() {
                return Err(bad(
                    key("coverage"),
                    "needs `merge`: the baseline moves only after a proven merge".into(),
                ));
            }
            if c.argv.is_empty() {
                return Err(bad(
                    key("coverage.argv"),
                    "must name a program to run".into(),
                ));
            }
            if c.floor.is_some_and(|f| !(0.0..=100.0).contains(&f)) {
                return Err(bad(key("coverage.floor"), "must be within 0..100".into()));
            }
            if c.epsilon.is_nan() || c.epsilon < 0.0 {
                return Err(bad(key("coverage.epsilon"), "must be 0 or more".into()));
            }
            at_least_one(key("coverage.timeout_s"), c.timeout_s)?;
        }
        if let Some(sec) = &r.security {
            if sec.argv.first().is_some_and(|a| a.trim().is_empty()) {
                return Err(bad(
                    key("security.argv"),
                    "must name a program to run".into(),
                ));
            }
            at_least_one(key("security.timeout_s"), sec.timeout_s)?;
        }
        if let Some(m) = &r.merge
            && m.mode == MergeMode::Gitea
            && cfg.gitea().is_none()
        {
            return Err(bad(
                key("merge.mode"),
                "is `gitea` but there is no `forge: {kind: gitea, base_url: …}` block".into(),
            ));
        }
        if let Some(p) = &r.post_deploy {
            if p.urls.is_empty() {
                return Err(bad(
                    key("post_deploy.urls"),
                    "must list at least one URL".into(),
                ));
            }
            at_least_one(key("post_deploy.interval_s"), p.interval_s)?;
            at_least_one(key("post_deploy.fail_threshold"), p.fail_threshold.into())?;
            if p.window_s < p.interval_s {
                return Err(bad(
                    key("post_deploy.window_s"),
                    "must be at least interval_s".into(),
                ));
            }
            if !(0.0..=1.0).contains(&p.error_ratio) {
                return Err(bad(
                    key("post_deploy.error_ratio"),
                    "must be within 0..1".into(),
                ));
            }
            for (j, u) in p.urls.iter().enumerate() {
                if !(u.url.starts_with("http://") || u.url.starts_with("https://")) {
                    return Err(bad(
                        key(&format!("post_deploy.urls[{j}].url")),
                        "must be an http:// or https:// URL".into(),
                    ));
                }
            }
        }
        if let Some(d) = &r.deploy
            && d.mode == DeployMode::Hook
            && d.argv.is_empty()
        {
            return Err(bad(
                key("deploy.argv"),
                "is required when deploy.mode is `hook`".into(),
            ));
        }
        for (role, rc) in &r.agent {
            agent_role(key(&format!("agent.{role}")), role)?;
            if let Some(t) = rc.timeout_s {
                at_least_one(key(&format!("agent.{role}.timeout_s")), t)?;
            }
        }
        if let Some(t) = r.ci.timeout_s {
            at_least_one(key("ci.timeout_s"), t)?;
        }
        if let Some(t) = r.deploy.as_ref().and_then(|d| d.timeout_s) {
            at_least_one(key("deploy.timeout_s"), t)?;
        }
    }
    for (name, svc, kinds) in [
        ("tracker", &cfg.tracker, &["plane"][..]),
        ("forge", &cfg.forge, &["gitea", "git"][..]),
        ("chat", &cfg.chat, &["telegram"][..]),
    ] {
        if let Some(s) = svc {
            // A typo here would silently turn outbound writes off.
            if !kinds.contains(&s.kind.as_str()) {
                return Err(bad(
                    format!("{name}.kind"),
                    format!("`{}` is not one of: {}", s.kind, kinds.join(", ")),
                ));
            }
            for (k, v) in [
                ("token_env", &s.token_env),
                ("webhook_secret_env", &s.webhook_secret_env),
            ] {
                if let Some(v) = v
                    && (v.is_empty() || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
                {
                    return Err(bad(
                        format!("{name}.{k}"),
                        "must name an environment variable (letters, digits, `_`)".into(),
                    ));
                }
            }
        }
    }
    Ok(())
}
