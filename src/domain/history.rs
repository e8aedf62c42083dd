//! The words of the transition history (design §3.3, §12): who acted (`Actor`) and what came of it
//! (`Outcome`). Both are stored as lower-case text and parsed back into these enums, so no code
//! outside this file compares history words as strings.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::domain::stage::{UnknownName, parse_named};
use crate::error::Code;

/// Who acts (the `actor` column of the history).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Actor {
    Operator,
    Supervisor,
    Tick,
    Webhook,
    Reconciler,
}

impl Actor {
    pub const ALL: [Actor; 5] = [
        Actor::Operator,
        Actor::Supervisor,
        Actor::Tick,
        Actor::Webhook,
        Actor::Reconciler,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Operator => "operator",
            Actor::Supervisor => "supervisor",
            Actor::Tick => "tick",
            Actor::Webhook => "webhook",
            Actor::Reconciler => "reconciler",
        }
    }
}

/// One history row's outcome. The first seven are the decisions of `orch advance` (and of the
/// runners); the others record gestures and checks that are not gate decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Advanced,
    RolledBack,
    NotSatisfied,
    Deferred,
    StageCasLost,
    Held,
    Blocked,
    Approved,
    Paused,
    Resumed,
    Frozen,
    Unfrozen,
    Cancelled,
    Override,
    Checked,
    /// An operator re-queued a job that had failed for good (`orch retry`).
    Retried,
}

impl Outcome {
    pub const ALL: [Outcome; 16] = [
        Outcome::Advanced,
        Outcome::RolledBack,
        Outcome::NotSatisfied,
        Outcome::Deferred,
        Outcome::StageCasLost,
        Outcome::Held,
        Outcome::Blocked,
        Outcome::Approved,
        Outcome::Paused,
        Outcome::Resumed,
        Outcome::Frozen,
        Outcome::Unfrozen,
        Outcome::Cancelled,
        Outcome::Override,
        Outcome::Checked,
        Outcome::Retried,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Advanced => "advanced",
            Outcome::RolledBack => "rolled-back",
            Outcome::NotSatisfied => "not-satisfied",
            Outcome::Deferred => "deferred",
            Outcome::StageCasLost => "stage-cas-lost",
            Outcome::Held => "held",
            Outcome::Blocked => "blocked",
            Outcome::Approved => "approved",
            Outcome::Paused => "paused",
            Outcome::Resumed => "resumed",
            Outcome::Frozen => "frozen",
            Outcome::Unfrozen => "unfrozen",
            Outcome::Cancelled => "cancelled",
            Outcome::Override => "override",
            Outcome::Checked => "checked",
            Outcome::Retried => "retried",
        }
    }

    /// The exit code of a command whose result is this outcome (design §12): a recorded gesture
    /// or check is a success; a "no" is 3, "try later" 4, "needs a human" 5.
    pub fn code(self) -> Code {
        match self {
            Outcome::Advanced
            | Outcome::Approved
            | Outcome::Paused
            | Outcome::Resumed
            | Outcome::Frozen
            | Outcome::Unfrozen
            | Outcome::Cancelled
            | Outcome::Override
            | Outcome::Checked
            | Outcome::Retried => Code::Ok,
            Outcome::RolledBack | Outcome::NotSatisfied => Code::No,
            Outcome::Deferred | Outcome::StageCasLost => Code::Busy,
            Outcome::Held | Outcome::Blocked => Code::Held,
        }
    }
}

impl FromStr for Actor {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_named("actor", s, &Actor::ALL, Actor::as_str)
    }
}

impl FromStr for Outcome {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_named("history outcome", s, &Outcome::ALL, Outcome::as_str)
    }
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_round_trips_and_serializes_as_stored() {
        for o in Outcome::ALL {
            assert_eq!(o.as_str().parse::<Outcome>(), Ok(o));
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
        for a in Actor::ALL {
            assert_eq!(a.as_str().parse::<Actor>(), Ok(a));
            assert_eq!(serde_json::to_value(a).unwrap(), a.as_str());
        }
        assert!("Advanced".parse::<Outcome>().is_err());
    }

    #[test]
    fn decisions_map_to_the_exit_codes_of_spec_12() {
        use Outcome as O;
        for (o, code) in [
            (O::Advanced, 0),
            (O::RolledBack, 3),
            (O::NotSatisfied, 3),
            (O::Deferred, 4),
            (O::StageCasLost, 4),
            (O::Held, 5),
            (O::Blocked, 5),
        ] {
            assert_eq!(o.code() as u8, code, "{o}");
        }
    }
}
