//! The dedicated sandbox helper, installed beside `codespace`: the server launches every
//! sandboxed command through it (`codespace-sandbox-helper __sandbox-exec … -- argv…`). It links
//! only the sandbox crate, so it loads far faster than the server binary, which stays the
//! fallback (`codespace __sandbox-exec`) when this one is missing. `__sandbox-spare` starts it
//! as a warm spare that waits for its command from the server. `--helper-version` prints the
//! line the server checks before using it.

#![forbid(unsafe_code)]

use std::ffi::OsString;

use codespace_runner_sandbox::{
    HELPER_ARG, HELPER_BIN_NAME, HELPER_VERSION_ARG, SPARE_ARG, helper_version_line, run_helper,
    run_spare,
};

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match args.split_first() {
        Some((first, rest)) if first == HELPER_ARG => run_helper(rest),
        Some((first, rest)) if first == SPARE_ARG => run_spare(rest),
        Some((first, [])) if first == HELPER_VERSION_ARG => println!("{}", helper_version_line()),
        _ => {
            eprintln!(
                "{HELPER_BIN_NAME} is the command sandbox of codespace, started by the server: \
                 usage: {HELPER_BIN_NAME} {HELPER_ARG} -- argv… | {HELPER_VERSION_ARG}"
            );
            std::process::exit(2)
        }
    }
}
