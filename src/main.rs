//! The `orch` binary: everything lives in the library so it can be tested.

fn main() -> std::process::ExitCode {
    orch::run(std::env::args_os())
}
