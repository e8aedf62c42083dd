//! The sandbox guard (design §9) and the outbox's notion of a target, as pure functions.
//!
//! Every outbox row names its target as `<service>:<project>`: `plane:<project id>` (tracker),
//! `gitea:<owner>/<name>` (forge API), `git:<repo name>` (a plain git remote), or
//! `telegram:<chat id>` (chat). A process whose environment has `ORCH_SANDBOX` set (to anything
//! but empty or `0`) may write only to targets whose project is listed in
//! `sandbox.allowed_projects`; everything else is refused before a byte is sent. There is
//! deliberately no setting that turns the refusal off.
//!
//! Not here: reading the environment or the config (the caller passes both), logging, and what
//! happens to a refused row (it stays pending for an unsandboxed process to deliver).

use std::fmt;

/// Which outside service a write goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    Plane,
    Gitea,
    Git,
    Telegram,
}

impl Service {
    pub fn as_str(self) -> &'static str {
        match self {
            Service::Plane => "plane",
            Service::Gitea => "gitea",
            Service::Git => "git",
            Service::Telegram => "telegram",
        }
    }
}

/// Where one outbound write goes: the service and the project (tracker project, forge repo,
/// git repo, chat) inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub service: Service,
    pub project: String,
}

impl Target {
    pub fn new(service: Service, project: impl Into<String>) -> Target {
        Target {
            service,
            project: project.into(),
        }
    }

    /// Parse the `target` column; `None` for anything malformed.
    pub fn parse(s: &str) -> Option<Target> {
        let (service, project) = s.split_once(':')?;
        let service = match service {
            "plane" => Service::Plane,
            "gitea" => Service::Gitea,
            "git" => Service::Git,
            "telegram" => Service::Telegram,
            _ => return None,
        };
        (!project.is_empty() && !project.chars().any(char::is_control))
            .then(|| Target::new(service, project))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.service.as_str(), self.project)
    }
}

/// Whether the value of `ORCH_SANDBOX` puts this process in the sandbox. Fails closed: any
/// value but empty or `0` does.
pub fn sandboxed(value: Option<&str>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v.trim() != "0")
}

/// The guard's answer for one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Refused(String),
}

/// May this process write to `target`?
pub fn check(sandboxed: bool, allowed_projects: &[String], target: &Target) -> Verdict {
    if !sandboxed || allowed_projects.contains(&target.project) {
        return Verdict::Allowed;
    }
    Verdict::Refused(format!(
        "sandboxed process (ORCH_SANDBOX is set): project `{}` of `{}` is not in sandbox.allowed_projects",
        target.project,
        target.service.as_str()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_round_trip_and_malformed_ones_are_none() {
        for s in [
            "plane:0f6c-1",
            "gitea:team/shop",
            "git:shop",
            "telegram:-100123",
        ] {
            assert_eq!(Target::parse(s).unwrap().to_string(), s);
        }
        for bad in ["", "plane", "plane:", "jira:x", "telegram:a\nb", ":x"] {
            assert_eq!(Target::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_sandbox_is_entered_by_any_value_but_empty_or_zero() {
        for (v, want) in [
            (None, false),
            (Some(""), false),
            (Some("0"), false),
            (Some("1"), true),
            (Some("true"), true),
            (Some("yes"), true),
        ] {
            assert_eq!(sandboxed(v), want, "{v:?}");
        }
    }

    #[test]
    fn only_allowlisted_projects_pass_in_the_sandbox() {
        let allowed = vec!["sandbox-proj".to_string(), "team/sandbox".to_string()];
        let t = |s: &str| Target::parse(s).unwrap();
        let cases = [
            (false, "plane:prod", true),
            (true, "plane:prod", false),
            (true, "plane:sandbox-proj", true),
            (true, "gitea:team/sandbox", true),
            (true, "gitea:team/shop", false),
            (true, "telegram:-100", false),
            (true, "git:shop", false),
            // A prefix or a different case is not a match.
            (true, "plane:sandbox-proj2", false),
            (true, "plane:Sandbox-proj", false),
        ];
        for (sb, target, ok) in cases {
            let v = check(sb, &allowed, &t(target));
            assert_eq!(v == Verdict::Allowed, ok, "{sb} {target}: {v:?}");
            if let Verdict::Refused(why) = v {
                assert!(why.contains(&t(target).project), "{why}");
            }
        }
        // An empty allowlist refuses everything in the sandbox.
        assert!(matches!(
            check(true, &[], &t("plane:x")),
            Verdict::Refused(_)
        ));
    }
}
