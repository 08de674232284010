//! Signed policy sets (issue 32 item 2), through the real binary with keys the test generates:
//! `policy sign` writes the set's SSH signature, `policy validate --allowed-signers` names the
//! signer and refuses a stranger's signature; with `policies.require_signature` the server refuses
//! to start on an unsigned set, shows the signer in `workspace_info.policy.signer`, and hot reload
//! keeps the last good set when an edit is not signed, taking it once it is.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::cli_common::{both, repo};
use crate::stdio_common;

use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use stdio_common::{BIN, StdioServer};

const DEADLINE: Duration = Duration::from_secs(30);

fn cli(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("CODESPACE_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// True when `ssh-keygen` can sign (OpenSSH 8.2+); a skip fails under `CI=true`.
fn have_ssh_keygen(test: &str) -> bool {
    let ok = Command::new("ssh-keygen")
        .arg("-Y")
        .arg("help")
        .stderr(Stdio::piped())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stderr).contains("sign"));
    codespace_test_skip::require(
        ok,
        test,
        "ssh-keygen with -Y sign (openssh-client) not found",
    )
}

/// A new ed25519 key `<dir>/<name>` without passphrase; its public line.
fn keygen(dir: &Path, name: &str) -> String {
    let k = dir.join(name);
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&k)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::read_to_string(k.with_extension("pub"))
        .unwrap()
        .trim()
        .to_string()
}

struct Set {
    _dir: tempfile::TempDir,
    root: PathBuf,
    pol: PathBuf,
    schema: PathBuf,
    signers: PathBuf,
}

impl Set {
    fn new() -> Set {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let pol = root.join("policies");
        for sub in ["base", "profiles", "tests"] {
            std::fs::create_dir_all(pol.join(sub)).unwrap();
            for e in std::fs::read_dir(repo().join("policies").join(sub)).unwrap() {
                let p = e.unwrap().path();
                std::fs::copy(&p, pol.join(sub).join(p.file_name().unwrap())).unwrap();
            }
        }
        let schema = root.join("codespace.cedarschema");
        std::fs::copy(repo().join("schema/codespace.cedarschema"), &schema).unwrap();
        let keys = root.join("keys");
        std::fs::create_dir(&keys).unwrap();
        let alice = keygen(&keys, "alice");
        keygen(&keys, "mallory");
        let signers = root.join("allowed_signers");
        std::fs::write(
            &signers,
            format!("alice@example.com namespaces=\"codespace-policy\" {alice}\n"),
        )
        .unwrap();
        Set {
            _dir: dir,
            root,
            pol,
            schema,
            signers,
        }
    }

    fn loc(&self) -> Vec<String> {
        vec![
            "--policies".into(),
            self.pol.display().to_string(),
            "--schema".into(),
            self.schema.display().to_string(),
        ]
    }

    fn sign(&self, key: &str) -> Output {
        let mut a: Vec<String> = vec!["policy".into(), "sign".into()];
        a.extend(self.loc());
        a.push("--key".into());
        a.push(self.root.join("keys").join(key).display().to_string());
        cli(&a.iter().map(String::as_str).collect::<Vec<_>>())
    }

    fn validate(&self) -> Output {
        let mut a: Vec<String> = vec!["policy".into(), "validate".into()];
        a.extend(self.loc());
        a.push("--allowed-signers".into());
        a.push(self.signers.display().to_string());
        cli(&a.iter().map(String::as_str).collect::<Vec<_>>())
    }

    fn config(&self) -> PathBuf {
        let ws = self.root.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), "alpha\n").unwrap();
        let config = self.root.join("codespace.json");
        std::fs::write(
            &config,
            serde_json::to_string_pretty(&json!({
                "policies": {"dir": self.pol, "require_signature": true,
                             "allowed_signers": self.signers},
                "schema": self.schema, "store": self.root.join("audit.db"),
                "workspaces": {"w": {"root": ws, "profile": "workspace-write"}},
            }))
            .unwrap(),
        )
        .unwrap();
        config
    }
}

#[test]
fn sign_and_validate_name_the_signer_and_refuse_strangers() {
    if !have_ssh_keygen("sign_and_validate_name_the_signer_and_refuse_strangers") {
        return;
    }
    let set = Set::new();
    // Unsigned: refused when a signature is asked for.
    let o = set.validate();
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(both(&o).contains("the set is not signed"), "{}", both(&o));

    let o = set.sign("alice");
    assert!(o.status.success(), "{}", both(&o));
    assert!(set.pol.join("policy-set.sig").is_file());
    let o = set.validate();
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        both(&o).contains("signed by alice@example.com (ED25519 key SHA256:"),
        "{}",
        both(&o)
    );

    // Reformatting keeps the signature good (it covers the parsed form)...
    let ro = set.pol.join("profiles/read-only.cedar");
    let text = std::fs::read_to_string(&ro).unwrap();
    std::fs::write(&ro, format!("// a comment\n\n{text}")).unwrap();
    assert!(set.validate().status.success());
    // ...a change Cedar sees breaks it.
    std::fs::write(&ro, text.replace("\"info\"", "\"fs_read\"")).unwrap();
    let o = set.validate();
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        both(&o).contains("bad signature by alice@example.com"),
        "{}",
        both(&o)
    );
    std::fs::write(&ro, &text).unwrap();

    // A key outside allowed_signers.
    assert!(set.sign("mallory").status.success());
    let o = set.validate();
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(both(&o).contains("is not by a key of"), "{}", both(&o));
}

#[test]
fn a_server_requiring_signatures_refuses_unsigned_sets_at_start_and_on_reload() {
    if !have_ssh_keygen(
        "a_server_requiring_signatures_refuses_unsigned_sets_at_start_and_on_reload",
    ) {
        return;
    }
    let set = Set::new();
    let config = set.config();
    // Unsigned: the server does not start.
    let o = cli(&["serve", "--config", config.to_str().unwrap()]);
    assert!(!o.status.success(), "{}", both(&o));
    assert!(both(&o).contains("the set is not signed"), "{}", both(&o));

    assert!(set.sign("alice").status.success());
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&config)
        .stderr_file(set.root.join("stderr.log"))
        .deadline(DEADLINE)
        .spawn();
    s.initialize("signed");
    let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
    assert_eq!(
        info["policy"]["signer"]["principal"], "alice@example.com",
        "{info}"
    );
    let v1 = info["policy"]["set_sha256"].clone();

    // An edit that validates and passes the tests, but is not signed: refused, v1 stays.
    let ro = set.pol.join("profiles/read-only.cedar");
    let text = std::fs::read_to_string(&ro).unwrap();
    let edited = format!(
        "{text}\n@id(\"read-only.permit.extra\")\npermit (\n  principal in CodeSpace::PermissionProfile::\"read-only\",\n  action in CodeSpace::Action::\"info\",\n  resource\n);\n"
    );
    let tmp = set.root.join("ro.new");
    std::fs::write(&tmp, &edited).unwrap();
    std::fs::rename(&tmp, &ro).unwrap();
    let end = Instant::now() + DEADLINE;
    loop {
        let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
        assert_eq!(info["policy"]["set_sha256"], v1, "{info}");
        if let Some(r) = info["policy"].get("last_reload_rejected") {
            assert!(r.to_string().contains("bad signature"), "{r}");
            break;
        }
        assert!(Instant::now() < end, "the reload was never attempted");
        std::thread::sleep(Duration::from_millis(50));
    }

    // Signed: the next reload takes it.
    assert!(set.sign("alice").status.success());
    let end = Instant::now() + DEADLINE;
    loop {
        let info = s.tool_ok("workspace_info", json!({"workspace_id": "w"}));
        if info["policy"]["set_sha256"] != v1 {
            assert!(
                info["policy"].get("last_reload_rejected").is_none(),
                "{info}"
            );
            assert_eq!(info["policy"]["signer"]["principal"], "alice@example.com");
            break;
        }
        assert!(Instant::now() < end, "the signed set never went live");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The decision rows `codespace audit` exports from `store` (`--json`, or OCSF lines).
fn audit_rows(store: &Path, format: &[&str]) -> Vec<serde_json::Value> {
    let mut a = vec!["audit", "--store", store.to_str().unwrap(), "--all-rows"];
    a.extend_from_slice(format);
    let o = cli(&a);
    assert!(o.status.success(), "{}", both(&o));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .collect()
}

#[test]
fn audit_rows_name_the_signer_of_their_policy_set_and_an_unsigned_set_none() {
    if !have_ssh_keygen("audit_rows_name_the_signer_of_their_policy_set_and_an_unsigned_set_none") {
        return;
    }
    let set = Set::new();
    let config = set.config();
    assert!(set.sign("alice").status.success());
    let mut s = StdioServer::serve()
        .arg("--config")
        .arg(&config)
        .stderr_file(set.root.join("stderr.log"))
        .deadline(DEADLINE)
        .spawn();
    s.initialize("signed");
    s.tool_ok("read", json!({"workspace_id": "w", "path": "a.txt"}));
    // A mutating call's reply means the read's queued row is committed.
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "w",
               "patch": "*** Begin Patch\n*** Add File: b.txt\n+x\n*** End Patch\n"}),
    );
    s.close_and_wait(DEADLINE);
    let store = set.root.join("audit.db");
    let rows = audit_rows(&store, &["--json"]);
    let read = rows
        .iter()
        .find(|r| r["tool"] == "read" && r["subject"] == "a.txt")
        .unwrap_or_else(|| panic!("no read row: {rows:?}"));
    assert_eq!(
        read["policy_signer"]["principal"], "alice@example.com",
        "{read}"
    );
    assert!(
        read["policy_signer"]["key"]
            .as_str()
            .unwrap()
            .starts_with("ED25519 key SHA256:"),
        "{read}"
    );
    let ocsf = audit_rows(&store, &["--format", "ocsf"]);
    assert!(
        ocsf.iter()
            .all(|e| e["unmapped"]["policy_signer"]["principal"] == "alice@example.com"),
        "{ocsf:?}"
    );

    // An unsigned set (no signature asked for): its rows name no signer.
    let mut s = StdioServer::serve_temp_workspace().spawn();
    s.initialize("unsigned");
    s.tool_ok("read", json!({"workspace_id": "default", "path": "a.txt"}));
    s.tool_ok(
        "apply_patch",
        json!({"workspace_id": "default",
               "patch": "*** Begin Patch\n*** Add File: b.txt\n+x\n*** End Patch\n"}),
    );
    let store = s.dir().join("store.db");
    let rows = audit_rows(&store, &["--json"]);
    let read = rows
        .iter()
        .find(|r| r["tool"] == "read")
        .unwrap_or_else(|| panic!("no read row: {rows:?}"));
    assert!(read["policy_signer"].is_null(), "{read}");
    let ocsf = audit_rows(&store, &["--format", "ocsf"]);
    assert!(
        ocsf.iter()
            .all(|e| e["unmapped"].get("policy_signer").is_none()),
        "{ocsf:?}"
    );
    s.close_and_wait(DEADLINE);
}
