//! The exit-code contract of design §12 and the one typed error that carries it. Everything else
//! is `anyhow`; an error without an `Exit` inside maps to exit 1 (runtime error).

use std::fmt;

/// Exit codes that runbooks depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok = 0,
    Runtime = 1,
    Usage = 2,
    No = 3,
    Busy = 4,
    Held = 5,
}

/// An error whose exit code is not 1.
#[derive(Debug)]
pub struct Exit {
    pub code: Code,
    pub message: String,
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

/// Bad usage or rejected input (exit 2).
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Exit {
        code: Code::Usage,
        message: message.into(),
    })
}

/// An error with an explicit code.
pub fn exit(code: Code, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Exit {
        code,
        message: message.into(),
    })
}

/// The code an error maps to: the first `Exit` in its chain, else 1.
pub fn code_of(err: &anyhow::Error) -> Code {
    err.chain()
        .find_map(|e| e.downcast_ref::<Exit>())
        .map(|e| e.code)
        .unwrap_or(Code::Runtime)
}
