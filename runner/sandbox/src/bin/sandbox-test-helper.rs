//! Test-only stand-in for the `codespace` binary: `__sandbox-exec -- argv…` runs the sandbox
//! helper; `__harden-check` hardens itself and prints its dumpable flag and core limit.

use std::ffi::OsString;
use std::io::Write;

use codespace_runner_sandbox::{
    HELPER_ARG, SPARE_ARG, harden_current_process, run_helper, run_spare,
};

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match args.split_first() {
        Some((first, rest)) if first == HELPER_ARG => run_helper(rest),
        Some((first, rest)) if first == SPARE_ARG => run_spare(rest),
        Some((first, _)) if first == "__harden-check" => harden_check(),
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "usage: {HELPER_ARG} -- argv… | __harden-check"
            );
            std::process::exit(2);
        }
    }
}

fn harden_check() {
    if let Err(e) = harden_current_process() {
        let _ = writeln!(std::io::stderr(), "{e}");
        std::process::exit(1);
    }
    let dumpable = match rustix::process::dumpable_behavior() {
        Ok(rustix::process::DumpableBehavior::NotDumpable) => "0",
        Ok(_) => "1",
        Err(_) => "error",
    };
    let core = rustix::process::getrlimit(rustix::process::Resource::Core);
    let show = |v: Option<u64>| v.map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
    println!(
        "dumpable={dumpable} core={}/{}",
        show(core.current),
        show(core.maximum)
    );
}
