//! `workspace_info.execution.capabilities`: for each capability, whether the workspace's
//! profile may use it `allowed` (every probe allowed), `denied` (none) or `conditional` (some),
//! with the ids of the policies that decided the probes. The probes are a fixed, documented set
//! of typical requests per capability (docs/policy.md, "What workspace_info reports"); they
//! are decided like real calls (same request builder, same policy set) but not audited.

use crate::gateway::Authorized;
use crate::request::{SubRequest, build_requests, path_request};
pub use crate::wire::Capability;
use crate::wire::{ExecCommandParams, ToolCall};
use std::collections::{BTreeMap, BTreeSet};

/// Paths a `read` (and the listing tools' withholding) is probed with.
pub const READ_PROBES: &[&str] = &[
    ".",
    "README.md",
    "src/main.rs",
    "src/lib.rs",
    "tests/test_app.py",
    "docs/index.md",
    ".env",
    ".git/config",
    "config/secrets.pem",
];

/// `apply_patch` probes: path and touch kind.
pub const WRITE_PROBES: &[(&str, &str)] = &[
    ("README.md", "update"),
    ("src/lib.rs", "update"),
    ("src/new.rs", "add"),
    ("old.txt", "delete"),
    (".env", "update"),
    (".git/hooks/pre-commit", "add"),
];

/// `exec_command` probes: argv and the names of its `env`.
pub const EXEC_PROBES: &[(&[&str], &[&str])] = &[
    (&["true"], &[]),
    (&["cargo", "test"], &[]),
    (&["python3", "-m", "pytest"], &[]),
    (&["npm", "test"], &[]),
    (&["make"], &[]),
    (&["git", "status"], &[]),
    (&["bash", "-c", "true"], &[]),
    (&["cargo", "test"], &["RUST_BACKTRACE"]),
    (&["cargo", "test"], &["LD_PRELOAD"]),
];

/// Decides every probe of every capability for `ws`.
pub(crate) fn capabilities(auth: &Authorized<'_>) -> BTreeMap<&'static str, Capability> {
    let (ws, session) = (auth.ws(), auth.session());
    let mut probes: Vec<(&'static str, Vec<SubRequest>)> = Vec::new();
    for path in READ_PROBES {
        probes.push((
            "read",
            vec![path_request(crate::policy::Action::READ, path, "", session)],
        ));
    }
    for tool in [
        crate::policy::Action::FIND,
        crate::policy::Action::GREP,
        crate::policy::Action::FIND_FILES,
    ] {
        probes.push((tool.as_str(), vec![path_request(tool, ".", "", session)]));
    }
    for (path, kind) in WRITE_PROBES {
        probes.push((
            "write",
            vec![path_request(
                crate::policy::Action::APPLY_PATCH,
                path,
                kind,
                session,
            )],
        ));
    }
    for (argv, env) in EXEC_PROBES {
        let call = ToolCall::ExecCommand(ExecCommandParams {
            workspace_id: ws.facts.id.clone(),
            command: argv.iter().map(|a| (*a).to_string()).collect(),
            tty: None,
            timeout_ms: None,
            yield_ms: None,
            operation_key: None,
            env: (!env.is_empty())
                .then(|| env.iter().map(|n| ((*n).to_string(), "1".into())).collect()),
            cwd: None,
            background: None,
            stderr: None,
        });
        if let Ok(reqs) = build_requests(&call, session, None) {
            let gating = reqs.into_iter().filter(|r| r.gating).collect();
            probes.push(("exec", gating));
        }
    }
    let mut seen: BTreeMap<&'static str, (usize, usize, BTreeSet<String>)> = BTreeMap::new();
    for (cap, reqs) in probes {
        let d = auth.decide_quietly("workspace_info", &reqs);
        let entry = seen.entry(cap).or_default();
        let allowed = d.allowed();
        if allowed {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
        for s in &d.subs {
            // The ids that decided this probe's outcome: permits when it is allowed, the
            // denying sub-requests' forbids when it is not.
            if s.allowed == allowed {
                entry.2.extend(s.policy_ids.iter().cloned());
            }
        }
    }
    seen.into_iter()
        .map(|(cap, (allowed, denied, ids))| {
            let decision = match (allowed, denied) {
                (_, 0) => "allowed",
                (0, _) => "denied",
                _ => "conditional",
            };
            (
                cap,
                Capability {
                    decision,
                    policy_ids: ids.into_iter().collect(),
                },
            )
        })
        .collect()
}
