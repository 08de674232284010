//! The dedicated sandbox helper, installed beside `codespace`: the server launches every
//! sandboxed command through it (`codespace-sandbox-helper __sandbox-exec … -- argv…`). It links
//! only the sandbox crate, so it loads far faster than the server binary, which stays the
//! fallback (`codespace __sandbox-exec`) when this one is missing. `__sandbox-spare` starts it
//! as a warm spare that waits for its command from the server. `--helper-version` prints the
//! line the server checks before using it. Its whole `main` is the sandbox crate's
//! `dedicated_main`, which a static build shares (`scripts/build-static-helper.sh`).

#![forbid(unsafe_code)]

fn main() {
    println!("{}", codespace_runner_sandbox::dedicated_main());
}
