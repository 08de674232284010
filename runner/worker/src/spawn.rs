//! Transport (a): a worker whose stdin/stdout are the stream — `ssh HOST codespace worker
//! --stdio`, `podman exec -i`, `kubectl exec -i`, the `command` kind all are this. The child
//! runs in its own process group, killed with the client; its stderr's tail is kept for the
//! reason an environment is unavailable.

use crate::client::{Client, EventReceiver};
use crate::{Identity, Secret, WorkerError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// Bytes of the worker's stderr kept (the last ones).
pub const STDERR_TAIL: usize = 8 * 1024;

/// What to start.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    /// The program and its arguments (never the secret).
    pub argv: Vec<OsString>,
    /// Variables added to the inherited environment.
    pub env: Vec<(OsString, OsString)>,
}

/// The last [`STDERR_TAIL`] bytes of a worker's stderr.
#[derive(Clone, Default)]
pub struct StderrTail(Arc<Mutex<VecDeque<u8>>>);

impl StderrTail {
    fn push(&self, bytes: &[u8]) {
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        q.extend(bytes);
        let over = q.len().saturating_sub(STDERR_TAIL);
        q.drain(..over);
    }

    /// The tail as text (lossy), trimmed.
    pub fn text(&self) -> String {
        let q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let v: Vec<u8> = q.iter().copied().collect();
        String::from_utf8_lossy(&v).trim().to_string()
    }
}

/// Kills the worker's whole process group when the client goes.
struct ChildGuard {
    child: Child,
    pgid: Option<rustix::process::Pid>,
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        // kill_on_drop reaps the leader in the background.
        let _ = self.child.start_kill();
    }
}

/// Starts `spec.argv`, writes the secret line to its stdin, then says hello. A worker that
/// fails before answering is a handshake error that ends with its stderr's tail.
pub async fn spawn<Req, Resp, Ev>(
    spec: &SpawnSpec,
    secret: &Secret,
    me: &Identity,
) -> Result<(Client<Req, Resp, Ev>, EventReceiver<Ev>), WorkerError>
where
    Req: Serialize,
    Resp: DeserializeOwned + Send + 'static,
    Ev: DeserializeOwned + Send + 'static,
{
    let Some((program, args)) = spec.argv.split_first() else {
        return Err(WorkerError::Transport("an empty argv".into()));
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    let mut child = cmd.spawn().map_err(|e| {
        WorkerError::Transport(format!("cannot start {}: {e}", program.to_string_lossy()))
    })?;
    let pgid = child
        .id()
        .and_then(|id| rustix::process::Pid::from_raw(id as i32));
    let (Some(mut stdin), Some(stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(WorkerError::Transport(
            "the child's pipes are missing".into(),
        ));
    };
    let tail = StderrTail::default();
    let t = tail.clone();
    let stderr_done = tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf).await {
            match buf.get(..n) {
                Some(b) if n > 0 => t.push(b),
                _ => break,
            }
        }
    });
    let guard = ChildGuard { child, pgid };

    let line = format!("{}\n", secret.expose());
    let started = stdin.write_all(line.as_bytes()).await;
    let result = match started {
        Err(e) => Err(WorkerError::Handshake(format!(
            "the worker does not take input: {e}"
        ))),
        Ok(()) => Client::handshake(stdout, stdin, secret, me).await,
    };
    match result {
        Ok((mut client, events)) => {
            let t = tail.clone();
            client.attach_transport(Box::new(guard), Some(Arc::new(move || t.text())));
            Ok((client, events))
        }
        Err(e) => {
            // The worker is gone or refused: its stderr ends soon; wait for it (bounded).
            drop(guard);
            let _ = tokio::time::timeout(Duration::from_secs(2), stderr_done).await;
            let tail = tail.text();
            Err(match (e, tail.is_empty()) {
                (e, true) => e,
                (e @ WorkerError::Mismatch { .. }, false) => e,
                (WorkerError::Handshake(m), false) => {
                    WorkerError::Handshake(format!("{m}; its stderr: {tail}"))
                }
                (e, false) => WorkerError::Transport(format!("{e}; its stderr: {tail}")),
            })
        }
    }
}
