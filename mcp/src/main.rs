//! The `codespace` binary: `serve` (MCP over stdio), `policy validate|test`, and the hidden
//! sandbox helper entry that the process runner re-executes.

mod cli;
mod server;

use std::process::ExitCode;

fn main() -> ExitCode {
    // The sandbox helper must run before any thread exists (seccomp, namespaces).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).map(|a| a.as_os_str()) == Some(std::ffi::OsStr::new(codespace_runner_sandbox::HELPER_ARG)) {
        codespace_runner_sandbox::run_helper(args.get(2..).unwrap_or(&[]));
    }
    cli::main()
}
