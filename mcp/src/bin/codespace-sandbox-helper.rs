//! The dedicated sandbox helper, installed beside `codespace`: the server launches every
//! sandboxed command through it (`codespace-sandbox-helper __sandbox-exec … -- argv…`). It links
//! only the sandbox crate, so it loads far faster than the server binary, which stays the
//! fallback (`codespace __sandbox-exec`) when this one is missing.

#![forbid(unsafe_code)]

fn main() {
    codespace_runner_sandbox::dedicated_main()
}
