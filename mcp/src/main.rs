//! The `codespace` binary: the sandbox helper entry (before any thread exists), then the CLI.

#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    // The sandbox helper must run before any thread exists (seccomp, namespaces).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).map(|a| a.as_os_str())
        == Some(std::ffi::OsStr::new(codespace_runner_sandbox::HELPER_ARG))
    {
        codespace_runner_sandbox::run_helper(args.get(2..).unwrap_or(&[]));
    }
    if args.get(1).map(|a| a.as_os_str())
        == Some(std::ffi::OsStr::new(codespace_runner_sandbox::SPARE_ARG))
    {
        codespace_runner_sandbox::run_spare(args.get(2..).unwrap_or(&[]));
    }
    codespace_mcp::cli::main()
}
