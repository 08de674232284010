//! `codespace environments install`: puts this build's binary on an `ssh` environment's host
//! through that environment's own connection (its known_hosts, key and options), cached by build
//! id: a host keeps one copy per build, and a second install of the same build sends nothing.

use anyhow::{Context, Result, anyhow, bail};
use codespace_engine::Config;
use codespace_engine::config::EnvironmentSpec;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// Where and what to install.
#[derive(clap::Args, Debug)]
pub struct InstallArgs {
    /// Operator config (JSON) naming the environment.
    #[arg(long, env = "CODESPACE_CONFIG")]
    pub config: PathBuf,
    /// The `ssh` environment's id.
    #[arg(long, value_name = "ID")]
    pub environment: String,
    /// The binary to install (default: this one).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// The directory on the host (relative paths are under the remote user's home).
    #[arg(long, value_name = "DIR", default_value = ".cache/codespace/bin")]
    pub dir: String,
}

/// The remote file's name: `codespace-<build id>`, the id's characters outside
/// `[A-Za-z0-9._-]` turned into `-`.
pub fn remote_name(build_id: &str) -> String {
    format!(
        "codespace-{}",
        codespace_engine::toolchains::plain_name(build_id)
    )
}

/// A remote directory given on the command line: only `[A-Za-z0-9._/-]`, no `..` component
/// (the path is written into the remote shell's command line, so nothing there may need quoting).
fn checked_dir(dir: &str) -> Result<&str> {
    let ok_chars = dir
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
    if dir.is_empty() || !ok_chars || dir.split('/').any(|p| p == "..") || dir.starts_with('-') {
        bail!("--dir must be a path of [A-Za-z0-9._/-] without `..` (got {dir:?})");
    }
    Ok(dir.trim_end_matches('/'))
}

/// Runs `codespace environments install`.
pub fn run(args: &InstallArgs) -> Result<ExitCode> {
    let config =
        Config::load(&args.config).with_context(|| format!("loading {}", args.config.display()))?;
    let env = config
        .environments
        .get(&args.environment)
        .ok_or_else(|| anyhow!("no environment {:?} in the config", args.environment))?;
    let EnvironmentSpec::Ssh(spec) = &env.spec else {
        bail!(
            "environment {:?} is not an ssh environment: containers the server starts mount this \
             binary, and named containers and pods take it from their image",
            args.environment
        );
    };
    let dir = checked_dir(&args.dir)?;
    let binary = match &args.binary {
        Some(b) => b.clone(),
        None => std::env::current_exe().context("finding this binary")?,
    };
    let bytes = std::fs::read(&binary).with_context(|| format!("reading {}", binary.display()))?;
    let digest = hex::encode(Sha256::digest(&bytes));
    let target = format!("{dir}/{}", remote_name(codespace_runner_worker::BUILD_ID));
    let control_dir = ControlDir::create()?;
    let control = control_dir.0.join("cm");
    // Present with the same bytes: nothing is sent.
    let check = format!(
        "test -x {target} && test \"$(sha256sum < {target} | cut -d' ' -f1)\" = {digest} \
         && echo present || echo missing"
    );
    let first = remote(spec, &control, &check, None)?;
    let state = if first.trim() == "present" {
        "present"
    } else {
        let upload = format!(
            "umask 077 && mkdir -p {dir} && cat > {target}.part.$$ && chmod 0700 {target}.part.$$ \
             && mv -f {target}.part.$$ {target}"
        );
        remote(spec, &control, &upload, Some(&bytes))?;
        let again = remote(spec, &control, &check, None)?;
        if again.trim() != "present" {
            bail!(
                "the copy on the host does not match {} after the upload",
                binary.display()
            );
        }
        "installed"
    };
    close(spec, &control);
    println!(
        "{state}: {target} (build {})",
        codespace_runner_worker::BUILD_ID
    );
    println!(
        "set environments.{}.ssh.worker_path to {target:?} (a relative path is under the remote \
         user's home)",
        args.environment
    );
    Ok(ExitCode::SUCCESS)
}

/// A private directory (0700) for the ssh control socket, removed when dropped.
struct ControlDir(PathBuf);

impl ControlDir {
    fn create() -> Result<ControlDir> {
        use std::os::unix::fs::DirBuilderExt;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let path =
            std::env::temp_dir().join(format!("codespace-install-{}-{nanos}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(ControlDir(path))
    }
}

impl Drop for ControlDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `script` on the host through the environment's connection (stdin: `input`, or nothing);
/// its stdout, or an error with its stderr.
fn remote(
    spec: &codespace_engine::config::SshSpec,
    control: &Path,
    script: &str,
    input: Option<&[u8]>,
) -> Result<String> {
    let argv = codespace_engine::environments::ssh_run_argv(spec, control, &[script]);
    let (program, rest) = argv
        .split_first()
        .ok_or_else(|| anyhow!("empty ssh argv"))?;
    let mut child = Command::new(program)
        .args(rest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {program}"))?;
    // Dropped at the end of the statement: the host sees the end of its stdin.
    if let (Some(mut stdin), Some(bytes)) = (child.stdin.take(), input) {
        stdin.write_all(bytes).context("sending the binary")?;
    }
    let out = child.wait_with_output().context("waiting for ssh")?;
    if !out.status.success() {
        bail!(
            "ssh to the host failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Ends the master connection the install opened.
fn close(spec: &codespace_engine::config::SshSpec, control: &Path) {
    let argv = codespace_engine::environments::ssh_close_argv(spec, control);
    if let Some((program, rest)) = argv.split_first() {
        let _ = Command::new(program)
            .args(rest)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_remote_name_keeps_only_safe_characters_of_the_build_id() {
        assert_eq!(remote_name("0.1.0+abc123"), "codespace-0.1.0-abc123");
        assert_eq!(remote_name("x y/z;$"), "codespace-x-y-z--");
    }

    #[test]
    fn a_dir_that_would_need_quoting_or_climbs_is_refused() {
        assert_eq!(
            checked_dir(".cache/codespace/bin/").unwrap(),
            ".cache/codespace/bin"
        );
        assert_eq!(checked_dir("/opt/codespace").unwrap(), "/opt/codespace");
        for bad in ["", "a b", "a;rm", "../x", "a/../b", "$HOME", "-rf", "a'b"] {
            assert!(checked_dir(bad).is_err(), "{bad}");
        }
    }
}
