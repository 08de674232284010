//! The host runner's plain conversions between the runner crates' types and the seam's DTOs:
//! file kinds, backups and the two journals of a commit (the recorded snapshot checked, a
//! snapshot only), a process's status, a `SandboxSpec` as the sandbox's plan.

use crate::processes::TmpDir;
use codespace_runner_api as api;
use codespace_runner_api::{RunnerError, RunnerResult};
use codespace_runner_fs::txn::{self, Journal};
use codespace_runner_fs::{Kind, RelPath};
use codespace_runner_process::ProcessInfo;
use codespace_runner_sandbox::{NetworkMode, SandboxPlan};
use std::path::PathBuf;

pub(super) fn kind(k: Kind) -> api::FileKind {
    match k {
        Kind::File => api::FileKind::File,
        Kind::Dir => api::FileKind::Dir,
        Kind::Symlink => api::FileKind::Symlink,
        Kind::Other => api::FileKind::Other,
    }
}

pub(super) fn backup_dto(b: &txn::Backup) -> api::Backup {
    api::Backup {
        path: b.path.as_str().to_string(),
        before: b.before.clone(),
    }
}

/// The journal of an apply: the gateway recorded the snapshot already, so recording checks that
/// the state about to be overwritten is still exactly what was journaled.
pub(super) struct Journaled<'a>(pub(super) &'a [api::Backup]);

impl Journal for Journaled<'_> {
    fn record(&mut self, backups: &[txn::Backup]) -> Result<(), String> {
        let now: Vec<api::Backup> = backups.iter().map(backup_dto).collect();
        if now == self.0 {
            Ok(())
        } else {
            Err("the files changed after the journal was recorded".into())
        }
    }
    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// The journal of a snapshot: keeps the backups and stops the commit before any write.
pub(super) struct Snapshot(pub(super) Vec<txn::Backup>);

pub(super) const SNAPSHOT_ONLY: &str = "snapshot only";

impl Journal for Snapshot {
    fn record(&mut self, backups: &[txn::Backup]) -> Result<(), String> {
        self.0 = backups.to_vec();
        Err(SNAPSHOT_ONLY.into())
    }
    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }
}

pub(super) fn status(info: &ProcessInfo) -> api::ProcessStatus {
    api::ProcessStatus {
        process_id: info.id.clone(),
        state: match info.state {
            codespace_runner_process::ProcState::Running => api::ProcessState::Running,
            codespace_runner_process::ProcState::Exited => api::ProcessState::Exited,
            codespace_runner_process::ProcState::Lost => api::ProcessState::Lost,
        },
        exit_code: info.exit_code,
        signal: info.signal,
        termination: info.termination.map(|t| t.as_str().to_string()),
        tty: info.tty,
        output_total: info.output_total,
        output_retained_from: info.output_retained_from,
        eof: info.eof,
    }
}

pub(super) fn plan(root: &std::path::Path, s: &api::SandboxSpec) -> SandboxPlan {
    let paths = |v: &[String]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
    let mut plan = SandboxPlan::new(root);
    plan.write_workspace = s.write_workspace;
    plan.write_paths = paths(&s.write_paths);
    plan.read_only = paths(&s.read_only);
    plan.masks = paths(&s.masks);
    plan.mask_non_utf8_top_level = s.mask_non_utf8_top_level;
    plan.network = match s.network {
        api::SandboxNetwork::Restricted => NetworkMode::Restricted,
        api::SandboxNetwork::Proxy => NetworkMode::Proxy,
        api::SandboxNetwork::Enabled => NetworkMode::Enabled,
    };
    plan.tmp_dir = s.tmp_dir.as_ref().map(PathBuf::from);
    plan.extra_read = paths(&s.extra_read);
    plan.home_dir = s.home_dir.as_ref().map(PathBuf::from);
    plan
}

/// The staged view of a `before_patch` hook's spec, written into a fresh private temp dir off
/// the async workers (the files are a patch's bounded contents); `None` without one.
pub(super) async fn stage_dir(s: &api::SandboxSpec) -> RunnerResult<Option<TmpDir>> {
    let Some(files) = &s.stage else {
        return Ok(None);
    };
    let files = files.clone();
    let dir = tokio::task::spawn_blocking(move || {
        let dir = crate::processes::make_tmp_dir()
            .map_err(|e| RunnerError::SpawnFailed { message: e.message })?;
        write_stage_files(dir.path(), &files)?;
        Ok::<_, RunnerError>(dir)
    })
    .await
    .map_err(|e| RunnerError::internal(format!("stage task: {e}")))??;
    Ok(Some(dir))
}

/// Writes a staged view's files (each path checked as a workspace path first) into `dir`.
fn write_stage_files(dir: &std::path::Path, files: &[api::StagedFile]) -> RunnerResult<()> {
    let mut paths = Vec::with_capacity(files.len());
    for f in files {
        let p = RelPath::parse(&f.path).map_err(|e| RunnerError::PathEscape {
            message: e.to_string(),
        })?;
        paths.push(p);
    }
    let staged: Vec<codespace_runner_sandbox::StagedFile<'_>> = files
        .iter()
        .zip(&paths)
        .map(|(f, p)| codespace_runner_sandbox::StagedFile {
            path: p.as_str(),
            content: f.data.as_deref().map(|d| (d, f.mode)),
        })
        .collect();
    codespace_runner_sandbox::write_stage(dir, &staged).map_err(|e| RunnerError::SpawnFailed {
        message: format!("cannot stage the patched files: {e}"),
    })
}

/// A runner's error as the tool error the wire carries (an `Unavailable` runner is
/// `ENVIRONMENT_UNAVAILABLE` where the contract has that code, else `INTERNAL`).
pub(crate) fn to_tool_error(e: RunnerError) -> crate::error::ToolError {
    let code = crate::error::ErrorCode::from_code(e.code());
    crate::error::ToolError::new(code, e.to_string())
}

/// The runner's commands' task limit as the worker protocol reports it.
pub(super) fn pids_probe(p: codespace_runner_process::PidsIsolation) -> api::PidsProbe {
    use codespace_runner_process::PidsMechanism as M;
    api::PidsProbe {
        limit: p.limit,
        mechanism: match p.mechanism {
            M::CgroupV2 => api::PidsEnforcement::CgroupV2,
            M::CgroupV1 => api::PidsEnforcement::CgroupV1,
            M::None => api::PidsEnforcement::None,
        },
    }
}

/// The process table's launcher for a sandbox launch, and the handshake to await after the spawn.
pub(super) fn launcher(
    launch: codespace_runner_sandbox::SandboxLaunch,
) -> (
    codespace_runner_sandbox::Handshake,
    codespace_runner_process::Launcher,
) {
    let launcher = codespace_runner_process::Launcher {
        program: launch.program,
        args: launch.args,
        env: launch.env,
        inherit_fds: (launch.inherit_fds.into_iter())
            .map(codespace_runner_process::InheritedFd)
            .collect(),
        self_start: launch.self_start,
        warm_spare: launch.warm_spare,
        spare_args: launch.spare_args,
        recycle_network: launch.recycle_network,
    };
    (launch.handshake, launcher)
}
