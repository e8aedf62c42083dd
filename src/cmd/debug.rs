//! `orch debug …`: tools for testing orch itself. `failpoints` lists every failpoint name, one a
//! line (or as JSON), for `ORCH_FAILPOINT`.

use anyhow::Result;
use serde::Serialize;

use crate::cli::DebugCmd;
use crate::error::Code;
use crate::ext::failpoint;
use crate::output;

#[derive(Serialize)]
struct Point {
    name: &'static str,
    at: &'static str,
}

#[derive(Serialize)]
struct Points {
    schema_version: u32,
    failpoints: Vec<Point>,
}

/// Needs no config and no state: it lists what the binary holds.
pub fn run(json: bool, cmd: DebugCmd) -> Result<Code> {
    match cmd {
        DebugCmd::Failpoints => {
            if json {
                output::json(&Points {
                    schema_version: 1,
                    failpoints: failpoint::ALL
                        .iter()
                        .map(|(name, at)| Point { name, at })
                        .collect(),
                });
            } else {
                for (name, _) in failpoint::ALL {
                    output::line(name);
                }
            }
            Ok(Code::Ok)
        }
    }
}
