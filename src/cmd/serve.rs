//! `orch serve [--listen ADDR]`: run the webhook shim until SIGTERM or SIGINT (design §8).

use anyhow::Result;

use crate::ctx::Ctx;
use crate::error::Code;
use crate::serve;

pub fn run(ctx: &mut Ctx, listen: &str) -> Result<Code> {
    serve::run(&ctx.config, listen, |addr| {
        // On stderr, with the logs: stdout stays free for data, and a supervisor or a test
        // reads the real port from here when `--listen` asked for port 0.
        eprintln!("listening on {addr}");
    })?;
    Ok(Code::Ok)
}
