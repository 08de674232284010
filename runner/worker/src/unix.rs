//! Transport (b): a Unix socket. The listening side creates the socket (mode 0600) in a
//! directory only its owner can enter, accepts only peers whose uid (`SO_PEERCRED`) is the
//! allowed one, then checks the secret; a stale socket left by a dead worker is replaced, a
//! live one is not. The connecting side can check the worker's uid too.

use crate::client::{Client, EventReceiver};
use crate::server::{Handler, serve};
use crate::{Identity, Secret, WorkerError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::{UnixListener, UnixStream};

/// A bound worker socket; the socket file is removed when it is dropped.
pub struct Listener {
    inner: UnixListener,
    path: PathBuf,
    allowed_uid: u32,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("path", &self.path)
            .field("allowed_uid", &self.allowed_uid)
            .finish()
    }
}

fn err(path: &Path, what: impl std::fmt::Display) -> WorkerError {
    WorkerError::Transport(format!("{}: {what}", path.display()))
}

/// Checks (creating it when missing, mode 0700) that `dir` is a directory this uid owns and
/// no one else may enter.
fn private_dir(dir: &Path) -> Result<(), WorkerError> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(err(dir, format!("cannot create the directory: {e}"))),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| err(dir, e))?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() {
        return Err(err(dir, "is not a directory"));
    }
    if meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(err(
            dir,
            format!(
                "the socket's directory must be owned by uid {me} and closed to others (mode 0700); it is uid {} mode {:o}",
                meta.uid(),
                meta.mode() & 0o7777
            ),
        ));
    }
    Ok(())
}

/// Binds `path` for peers of uid `allowed_uid`. A socket already at `path` is removed when
/// nothing listens on it (a dead worker's); a live one or a non-socket is an error.
pub fn bind(path: &Path, allowed_uid: u32) -> Result<Listener, WorkerError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| err(path, "the socket path needs a directory"))?;
    private_dir(dir)?;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(err(path, e)),
        Ok(m) if !m.file_type().is_socket() => {
            return Err(err(path, "exists and is not a socket"));
        }
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(err(path, "a worker already listens on it")),
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                std::fs::remove_file(path)
                    .map_err(|e| err(path, format!("cannot remove the stale socket: {e}")))?;
            }
            Err(e) => return Err(err(path, format!("cannot probe the old socket: {e}"))),
        },
    }
    let inner = UnixListener::bind(path).map_err(|e| err(path, format!("bind: {e}")))?;
    // The directory keeps others out while the mode is set.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| err(path, format!("chmod: {e}")))?;
    Ok(Listener {
        inner,
        path: path.to_path_buf(),
        allowed_uid,
    })
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Listener {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next connection from the allowed uid; others are closed unserved (and logged).
    pub async fn accept(&self) -> Result<UnixStream, WorkerError> {
        loop {
            let (stream, _) = self
                .inner
                .accept()
                .await
                .map_err(|e| WorkerError::io("accept", &e))?;
            match stream.peer_cred() {
                Ok(c) if c.uid() == self.allowed_uid => return Ok(stream),
                Ok(c) => tracing::warn!(
                    peer_uid = c.uid(),
                    allowed_uid = self.allowed_uid,
                    "worker socket: a peer of another uid refused"
                ),
                Err(e) => tracing::warn!(error = %e, "worker socket: no peer credentials; refused"),
            }
        }
    }

    /// Serves every allowed connection with `handler`, each in its own task, until accept fails.
    pub async fn serve_forever<H: Handler>(
        &self,
        handler: Arc<H>,
        secret: &Secret,
        me: &Identity,
    ) -> Result<(), WorkerError> {
        loop {
            let stream = self.accept().await?;
            let (r, w) = stream.into_split();
            let (h, s, m) = (handler.clone(), secret.clone(), me.clone());
            tokio::spawn(async move {
                if let Err(e) = serve(r, w, h, &s, &m).await {
                    tracing::info!(error = %e, "worker connection ended");
                }
            });
        }
    }
}

/// Connects to a worker's socket (when `expect_uid` is set, only to a worker of that uid) and
/// says hello.
pub async fn connect<Req, Resp, Ev>(
    path: &Path,
    expect_uid: Option<u32>,
    secret: &Secret,
    me: &Identity,
) -> Result<(Client<Req, Resp, Ev>, EventReceiver<Ev>), WorkerError>
where
    Req: Serialize,
    Resp: DeserializeOwned + Send + 'static,
    Ev: DeserializeOwned + Send + 'static,
{
    let stream = UnixStream::connect(path)
        .await
        .map_err(|e| err(path, format!("connect: {e}")))?;
    if let Some(want) = expect_uid {
        let got = stream
            .peer_cred()
            .map_err(|e| err(path, format!("no peer credentials: {e}")))?
            .uid();
        if got != want {
            return Err(err(
                path,
                format!("the worker runs as uid {got}, not the expected {want}"),
            ));
        }
    }
    let (r, w) = stream.into_split();
    Client::handshake(r, w, secret, me).await
}
