//! The Linux command sandbox: Landlock, seccomp, hardening, probe.
