//! Signed policy sets: the manifest a set's SSH signature covers (the parsed form's hash of the
//! schema and of every policy file, so formatting never breaks a signature) and its check
//! against an `allowed_signers` file, done by OpenSSH's own `ssh-keygen -Y find-principals` and
//! `ssh-keygen -Y verify` (the format and trust file git uses for signed commits).

use crate::load::{PolicyBundle, files_hash, normal_policies, normal_schema};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The signature namespace (`ssh-keygen -Y sign -n codespace-policy`): a signature made for git
/// or anything else never verifies as a policy set's.
pub const NAMESPACE: &str = "codespace-policy";

/// The signature file of a set, in the policies directory.
pub const SIG_FILE: &str = "policy-set.sig";

/// Who signed the set in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    /// The principal of the `allowed_signers` line whose key made the signature.
    pub principal: String,
    /// The key, as `ssh-keygen` names it (`ED25519 key SHA256:…`).
    pub key: String,
}

/// The operator's requirement: every live set must be signed by a key of `allowed_signers`.
#[derive(Debug, Clone)]
pub struct SigningRule {
    /// The `allowed_signers` file (absolute).
    pub allowed_signers: PathBuf,
}

fn hex_sha256(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The manifest a signature covers: one line per schema and policy file (in byte order of the
/// name) with the SHA-256 of its parsed form, then the set's hash. The same for the embedded
/// set and the same files on disk, and for any formatting of them.
pub fn manifest(bundle: &PolicyBundle) -> String {
    let mut files: Vec<_> = bundle.files.iter().collect();
    files.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let mut out = String::from("codespace-policy-set v1\n");
    out.push_str(&format!(
        "schema sha256:{}\n",
        hex_sha256(&normal_schema(&bundle.schema_text))
    ));
    for f in files {
        out.push_str(&format!(
            "file {} sha256:{}\n",
            f.name,
            hex_sha256(&normal_policies(&f.text))
        ));
    }
    out.push_str(&format!("set {}\n", files_hash(bundle)));
    out
}

/// Runs `ssh-keygen` with `args`, `stdin` on its input; (success, stdout, stderr).
fn ssh_keygen(args: &[&std::ffi::OsStr], stdin: &[u8]) -> Result<(bool, String, String), String> {
    let mut child = Command::new("ssh-keygen")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run ssh-keygen (OpenSSH 8.2 or later is needed): {e}"))?;
    if let Some(mut i) = child.stdin.take() {
        // A closed pipe (ssh-keygen failed early) shows in its status.
        let _ = i.write_all(stdin);
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("ssh-keygen: {e}"))?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    ))
}

/// The signature of the set in `dir` (`<dir>/policy-set.sig`).
pub fn sig_path(dir: &Path) -> PathBuf {
    dir.join(SIG_FILE)
}

/// Checks the signature of `bundle` (read from its directory's `policy-set.sig`) against the
/// rule's `allowed_signers`: the signing key must be listed for some principal (with the
/// `codespace-policy` namespace allowed) and the signature must cover this set's manifest. Fails
/// closed: no directory, no signature, an unknown key, another set, a missing `ssh-keygen`.
pub fn verify(bundle: &PolicyBundle, rule: &SigningRule) -> Result<Signer, String> {
    let Some(dir) = &bundle.dir else {
        return Err(
            "policies.require_signature: the embedded set carries no signature; set `policies` to a signed directory"
                .into(),
        );
    };
    let sig = sig_path(dir);
    let sig_text = std::fs::read(&sig).map_err(|e| {
        format!(
            "policies.require_signature: {}: {} (sign the set with `codespace policy sign`)",
            sig.display(),
            if e.kind() == std::io::ErrorKind::NotFound {
                "the set is not signed".to_string()
            } else {
                e.to_string()
            }
        )
    })?;
    // ssh-keygen reads the signature from a file: a private copy, so the one checked is the
    // one read.
    let tmp = tempfile::NamedTempFile::new().map_err(|e| format!("signature check: {e}"))?;
    std::fs::write(tmp.path(), &sig_text).map_err(|e| format!("signature check: {e}"))?;
    let signers = rule.allowed_signers.as_os_str();
    let (ok, principals, err) = ssh_keygen(
        &[
            "-Y".as_ref(),
            "find-principals".as_ref(),
            "-s".as_ref(),
            tmp.path().as_os_str(),
            "-f".as_ref(),
            signers,
        ],
        b"",
    )?;
    let principal = principals.lines().next().unwrap_or("").trim().to_string();
    if !ok || principal.is_empty() {
        return Err(format!(
            "policies.require_signature: the set's signature is not by a key of {} ({})",
            rule.allowed_signers.display(),
            if err.is_empty() {
                "no principal matches"
            } else {
                err.lines().next().unwrap_or("")
            }
        ));
    }
    let message = manifest(bundle);
    let (ok, out, err) = ssh_keygen(
        &[
            "-Y".as_ref(),
            "verify".as_ref(),
            "-f".as_ref(),
            signers,
            "-I".as_ref(),
            principal.as_ref(),
            "-n".as_ref(),
            NAMESPACE.as_ref(),
            "-s".as_ref(),
            tmp.path().as_os_str(),
        ],
        message.as_bytes(),
    )?;
    if !ok {
        return Err(format!(
            "policies.require_signature: bad signature by {principal}: it does not cover this set (a file changed since it was signed?) ({})",
            err.lines().chain(out.lines()).next().unwrap_or("")
        ));
    }
    // `Good "codespace-policy" signature for P with ED25519 key SHA256:…`
    let key = out
        .split_once(" with ")
        .map(|(_, k)| k.trim().to_string())
        .unwrap_or_default();
    Ok(Signer { principal, key })
}

/// Signs the set of `bundle` with the private key `key` (`ssh-keygen -Y sign -n
/// codespace-policy`); returns the armored signature to store as `policy-set.sig`.
pub fn sign(bundle: &PolicyBundle, key: &Path) -> Result<String, String> {
    let (ok, out, err) = ssh_keygen(
        &[
            "-Y".as_ref(),
            "sign".as_ref(),
            "-f".as_ref(),
            key.as_os_str(),
            "-n".as_ref(),
            NAMESPACE.as_ref(),
        ],
        manifest(bundle).as_bytes(),
    )?;
    if !ok || !out.contains("BEGIN SSH SIGNATURE") {
        return Err(format!(
            "ssh-keygen -Y sign failed: {}",
            err.lines().next().unwrap_or("")
        ));
    }
    Ok(format!("{out}\n"))
}
