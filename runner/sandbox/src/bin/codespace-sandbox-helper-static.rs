//! The dedicated sandbox helper's static build: the same `main` as
//! `mcp/src/bin/codespace-sandbox-helper.rs` ([`codespace_runner_sandbox::dedicated_main`]),
//! in a crate that links nothing but the sandbox, so `scripts/build-static-helper.sh` can build
//! it for `x86_64-unknown-linux-musl` (a static executable: no dynamic loader, and none of
//! glibc's CPU-feature probes, which trap to the hypervisor on a VM, at every helper's start)
//! and install it beside `codespace` under this name, which the server prefers.

#![forbid(unsafe_code)]

fn main() {
    println!("{}", codespace_runner_sandbox::dedicated_main());
}
