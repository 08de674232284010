//! PTY backend: starts a child as a session leader on a fresh 24x80 pseudo-terminal.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use portable_pty::{CommandBuilder, MasterPty, PtySize, native_pty_system};

use crate::error::SpawnError;
use crate::proc::Proc;

/// Initial terminal size.
const INITIAL_SIZE: PtySize = PtySize {
    rows: 24,
    cols: 80,
    pixel_width: 0,
    pixel_height: 0,
};

/// Size of one read from the terminal master.
const READ_CHUNK: usize = 64 * 1024;

/// A freshly started terminal child.
pub(crate) struct PtyChild {
    pub(crate) pid: u32,
    pub(crate) master: Box<dyn MasterPty + Send>,
    pub(crate) reader: Box<dyn Read + Send>,
    pub(crate) writer: Box<dyn Write + Send>,
}

fn failed(what: &str, err: &dyn std::fmt::Display) -> SpawnError {
    // The library's messages can contain absolute paths: log them, return a generic message.
    tracing::debug!(%err, "{what}");
    SpawnError::SpawnFailed(what.to_owned())
}

/// Starts `argv` (argv[0] is looked up in the PATH of `env`, relative to `cwd`) on a new terminal.
/// The child is a session leader with the terminal as its controlling tty, so pid == pgid == sid.
pub(crate) fn spawn_pty(
    argv: &[String],
    cwd: &Path,
    env: &[(String, String)],
) -> Result<PtyChild, SpawnError> {
    let pair = native_pty_system()
        .openpty(INITIAL_SIZE)
        .map_err(|e| failed("could not open a terminal", &e))?;
    let mut cmd = CommandBuilder::from_argv(argv.iter().map(Into::into).collect());
    cmd.env_clear();
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.cwd(cwd);
    let child = pair
        .slave
        .spawn_command(cmd)
        .map_err(|e| failed("could not start the program on a terminal", &e))?;
    drop(pair.slave);
    let pid = child
        .process_id()
        .ok_or_else(|| SpawnError::SpawnFailed("the terminal child has no pid".to_owned()))?;
    // The child is reaped by the table (waitid/waitpid), not through this handle; dropping a unix
    // portable-pty child neither kills nor waits.
    drop(child);
    let io = pair
        .master
        .try_clone_reader()
        .and_then(|r| Ok((r, pair.master.take_writer()?)));
    match io {
        Ok((reader, writer)) => Ok(PtyChild {
            pid,
            master: pair.master,
            reader,
            writer,
        }),
        Err(e) => {
            crate::signals::signal_group(pid, rustix::process::Signal::KILL);
            // Reap it in the background so no zombie is left behind.
            let _ = std::thread::Builder::new()
                .name("proc-reap".to_owned())
                .spawn(move || {
                    let _ = crate::signals::wait_exit_no_reap(pid);
                    crate::signals::reap_nonblocking(pid);
                });
            Err(failed("could not attach to the terminal", &e))
        }
    }
}

/// Blocking loop copying terminal output into the process's output (run on its own thread).
/// EIO (every slave holder gone) counts as end of stream.
pub(crate) fn read_loop(mut reader: Box<dyn Read + Send>, proc: Arc<Proc>) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let Some(bytes) = buf.get(..n) else { break };
                if !proc.output.push(bytes) {
                    break;
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => {
                if err.raw_os_error() != Some(libc::EIO) {
                    tracing::debug!(id = %proc.id, %err, "terminal read failed");
                }
                break;
            }
        }
    }
    proc.output.writer_done();
}
