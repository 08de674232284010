//! Link options of the `codespace` binary. On Linux with glibc it is linked with packed relative
//! relocations (`-z pack-relative-relocs`, `DT_RELR`): the loader then reads a table of a few
//! KiB at start instead of one 24-byte entry per pointer to relocate (megabytes), which every
//! process of the binary otherwise keeps resident — an idle worker's largest file-backed share
//! after its code. GNU ld (2.38 and later) and lld know the option; a binary linked with it
//! needs glibc 2.36 or later where it runs (`GLIBC_ABI_DT_RELR`), as docs/environments.md says.

fn main() {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" {
        println!("cargo:rustc-link-arg-bin=codespace=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
