//! Fail closed: Cedar skips a policy whose evaluation errors (even a forbid), so a decision must
//! deny whenever any policy errored — and say so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use codespace_engine::policy::{Decider, NoRows};
use codespace_engine::policy::{
    EMBEDDED_POLICIES, EMBEDDED_SCHEMA, PolicyBundle, SourceFile, compile,
};
use codespace_engine::request::{Session, WorkspaceFacts, build_requests};
use codespace_engine::{Config, ToolCall};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

/// A decider over one set, keeping no rows.
fn decider(snap: &Arc<codespace_engine::policy::PolicySnapshot>, cfg: &Config) -> Decider {
    Decider::over(Arc::clone(snap), cfg.profiles.clone(), Arc::new(NoRows))
}

fn facts(profile: &str) -> WorkspaceFacts {
    WorkspaceFacts {
        id: "w".into(),
        profile: profile.into(),
        environment: "local".into(),
        environment_kind: codespace_engine::config::EnvironmentKind::Host,
        environment_transport: codespace_engine::config::EnvironmentTransport::InProcess,
        environment_host: String::new(),
        sandbox: codespace_engine::facts::SandboxFact::Enforced,
        network_enforcement: codespace_engine::facts::NetworkEnforcement::Enforced,
        network: codespace_engine::config::Network::Restricted,
        approvals: codespace_engine::config::Approvals::Off,
        server_owned: vec![],
        workspace_sandbox: codespace_engine::config::SandboxMode::Required,
        secret_masking: codespace_engine::facts::MaskingFact::Enforced,
    }
}

#[test]
fn an_erroring_forbid_denies_instead_of_being_skipped() {
    // A forbid that overflows at run time for patches touching two or more files.
    let mut files: Vec<SourceFile> = EMBEDDED_POLICIES
        .iter()
        .map(|(n, t)| SourceFile {
            name: (*n).into(),
            text: (*t).into(),
        })
        .collect();
    files.push(SourceFile {
        name: "base/overflow.cedar".into(),
        text: r#"@id("base.forbid.overflow")
@reason("overflows on purpose")
forbid (principal, action == CodeSpace::Action::"apply_patch", resource)
when { context has patch && context.patch.files * 9223372036854775807 < 0 };"#
            .into(),
    });
    let snap = Arc::new(
        compile(PolicyBundle {
            schema_name: "schema".into(),
            schema_text: EMBEDDED_SCHEMA.into(),
            files,
            dir: None,
            links: Vec::new(),
        })
        .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config::embedded_default(dir.path()).unwrap();
    let f = facts("workspace-write");
    let base = decider(&snap, &cfg);
    let session = Session::stdio();
    let call = |patch: &str| {
        ToolCall::parse("apply_patch", &json!({"workspace_id": "w", "patch": patch})).unwrap()
    };

    // One file: 1 * MAX does not overflow, the forbid's condition is false: allowed.
    let one = call("*** Begin Patch\n*** Add File: a.txt\n+a\n*** End Patch\n");
    let d = base.probe_uncached(
        &snap,
        &f,
        "apply_patch",
        &build_requests(&one, &session, None).unwrap(),
        &Session::stdio(),
    );
    assert!(d.allowed(), "{d:?}");

    // Two files: the forbid errors. Cedar alone would allow (the permit holds, the erroring
    // forbid is skipped); we deny and report the error.
    let two =
        call("*** Begin Patch\n*** Add File: a.txt\n+a\n*** Add File: b.txt\n+b\n*** End Patch\n");
    let d = base.probe_uncached(
        &snap,
        &f,
        "apply_patch",
        &build_requests(&two, &session, None).unwrap(),
        &Session::stdio(),
    );
    assert!(!d.allowed());
    for s in &d.subs {
        assert!(!s.allowed);
        assert!(
            s.errors.iter().any(|e| e.contains("base.forbid.overflow")),
            "{:?}",
            s.errors
        );
        assert!(!s.default_deny);
    }
    let err = d.to_error(&snap);
    assert_eq!(err.code, codespace_engine::ErrorCode::Unauthorized);
    assert!(err.message.contains("evaluation failed"), "{}", err.message);
    assert!(err.decision_id.is_some());
}

#[test]
fn an_unknown_principal_is_a_deny_with_reasons() {
    let snap = Arc::new(compile(codespace_engine::PolicySource::Embedded.read().unwrap()).unwrap());
    let cfg = Config::embedded_default(Path::new("/")).unwrap();
    // A profile that is not among the entities: every policy that dereferences it cannot match,
    // and no permit applies.
    let f = facts("ghost");
    let base = decider(&snap, &cfg);
    let call = ToolCall::parse("read", &json!({"workspace_id": "w", "path": "a.txt"})).unwrap();
    let d = base.probe_uncached(
        &snap,
        &f,
        "read",
        &build_requests(&call, &Session::stdio(), None).unwrap(),
        &Session::stdio(),
    );
    assert!(!d.allowed());
    assert!(d.subs[0].default_deny || !d.subs[0].errors.is_empty());
}

#[test]
fn a_context_that_does_not_match_the_schema_is_a_deny() {
    let snap = Arc::new(compile(codespace_engine::PolicySource::Embedded.read().unwrap()).unwrap());
    let cfg = Config::embedded_default(Path::new("/")).unwrap();
    let f = facts("workspace-write");
    let base = decider(&snap, &cfg);
    let call = ToolCall::parse("read", &json!({"workspace_id": "w", "path": "a.txt"})).unwrap();
    let mut reqs = build_requests(&call, &Session::stdio(), None).unwrap();
    reqs[0].context = json!({"session": {"client": 7}});
    let d = base.probe_uncached(&snap, &f, "read", &reqs, &Session::stdio());
    assert!(!d.allowed());
    assert!(
        d.subs[0].errors.iter().any(|e| e.starts_with("context")),
        "{:?}",
        d.subs[0].errors
    );
}
