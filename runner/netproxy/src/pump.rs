//! The byte relay of an established connection: both directions at once, each moved by
//! `splice(2)` through a pipe of its own (socket → pipe → socket, no copy through user space),
//! with exact per-direction counters, half-close and an idle timeout.
//!
//! A direction waits for its source to be readable, splices what the socket holds into its pipe
//! (`SPLICE_F_NONBLOCK`, so a call never blocks a tokio worker), then splices the pipe out to the
//! destination, waiting for writability when the destination's send buffer is full. Bytes count
//! once they are handed to the destination socket. On end of stream from the source the
//! destination's write side is shut down (half-close) while the other direction goes on.
//!
//! A connection whose pipes cannot be created (descriptor or pipe-memory limits) or whose
//! source refuses `splice` before any byte moved (`EINVAL`) is copied through a fixed user-space
//! buffer instead: same counters, same half-close, same timeout.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::net::{RecvFlags, SendFlags, Shutdown};
use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// The capacity asked for each direction's pipe (the most bytes in flight inside the proxy per
/// direction). The kernel may grant less (`/proc/sys/fs/pipe-max-size`, per-user pipe memory);
/// the relay works with whatever it gets.
pub(crate) const PIPE_BYTES: usize = 1 << 20;

/// The user-space buffer of the copy fallback, per direction.
pub(crate) const COPY_CHUNK: usize = 256 * 1024;

/// How one connection's bytes are moved (tests force the fallback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `splice(2)` through a pipe per direction, falling back to [`Mode::Copy`] on its own.
    Splice,
    /// Read into a user-space buffer, write it out (forced by tests; otherwise reached only
    /// through the fallback).
    #[cfg(test)]
    Copy,
}

/// How a direction's bytes were moved in the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// Through its pipe.
    Spliced,
    /// Through the user-space buffer.
    Copied,
}

/// What one connection moved, per direction.
pub(crate) struct Meters<'a> {
    /// Client → target.
    pub(crate) out: &'a AtomicU64,
    /// Target → client.
    pub(crate) inn: &'a AtomicU64,
}

fn add(counter: &AtomicU64, n: usize) {
    counter.fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// When the connection last moved a byte, in milliseconds since `base`.
struct Activity {
    base: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Resolves once nothing moved for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let since = self.base.elapsed().saturating_sub(last);
            if since >= idle {
                return;
            }
            tokio::time::sleep(idle.saturating_sub(since)).await;
        }
    }
}

/// Relays both directions between `client` and `upstream` until both ends closed, or until
/// nothing moved for `idle`. Returns how each direction (out, in) moved its bytes, `None` for
/// one the idle timeout cut short.
pub(crate) async fn relay(
    client: &TcpStream,
    upstream: &TcpStream,
    meters: Meters<'_>,
    idle: Duration,
    mode: Mode,
) -> Option<(Path, Path)> {
    let activity = Activity {
        base: Instant::now(),
        last_ms: AtomicU64::new(0),
    };
    let out = one_way(client, upstream, meters.out, &activity, mode);
    let inn = one_way(upstream, client, meters.inn, &activity, mode);
    tokio::select! {
        paths = async { tokio::join!(out, inn) } => Some(paths),
        () = activity.idle_for(idle) => None,
    }
}

/// One direction to its end; the destination's write side is shut down afterwards.
async fn one_way(
    from: &TcpStream,
    to: &TcpStream,
    counter: &AtomicU64,
    activity: &Activity,
    mode: Mode,
) -> Path {
    let spliced = match mode {
        Mode::Splice => match pipe() {
            Some(pipe) => splice_loop(from, to, &pipe, counter, activity).await,
            None => Spliced::Refused,
        },
        #[cfg(test)]
        Mode::Copy => Spliced::Refused,
    };
    let path = if spliced == Spliced::Refused {
        copy_loop(from, to, counter, activity).await;
        Path::Copied
    } else {
        Path::Spliced
    };
    let _ = rustix::net::shutdown(to, Shutdown::Write);
    path
}

/// A non-blocking, close-on-exec pipe sized to [`PIPE_BYTES`] if the kernel grants it.
/// `None` when no pipe can be created.
fn pipe() -> Option<(OwnedFd, OwnedFd)> {
    let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).ok()?;
    // Smaller is fine: the default (64 KiB) still works, only with more wake-ups.
    let _ = rustix::pipe::fcntl_setpipe_size(&write, PIPE_BYTES);
    Some((read, write))
}

/// How a splice direction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spliced {
    /// End of stream, an error, or the peer went away: the direction is over.
    Done,
    /// The source refused splice before any byte moved: copy instead.
    Refused,
}

const FLAGS: SpliceFlags = SpliceFlags::MOVE.union(SpliceFlags::NONBLOCK);

async fn splice_loop(
    from: &TcpStream,
    to: &TcpStream,
    (pipe_read, pipe_write): &(OwnedFd, OwnedFd),
    counter: &AtomicU64,
    activity: &Activity,
) -> Spliced {
    let mut moved_any = false;
    loop {
        // The pipe is empty here, so `EAGAIN` can only mean the socket has nothing to read.
        let filled = from
            .async_io(Interest::READABLE, || {
                rustix::pipe::splice(from, None, pipe_write, None, PIPE_BYTES, FLAGS)
                    .map_err(io::Error::from)
            })
            .await;
        let mut in_pipe = match filled {
            Ok(0) => return Spliced::Done,
            Ok(n) => n,
            Err(e) if !moved_any && refuses_splice(&e) => return Spliced::Refused,
            Err(_) => return Spliced::Done,
        };
        moved_any = true;
        activity.touch();
        // The pipe holds `in_pipe` bytes, so `EAGAIN` can only mean the socket is full.
        while in_pipe > 0 {
            let drained = to
                .async_io(Interest::WRITABLE, || {
                    rustix::pipe::splice(pipe_read, None, to, None, in_pipe, FLAGS)
                        .map_err(io::Error::from)
                })
                .await;
            match drained {
                Ok(0) | Err(_) => return Spliced::Done,
                Ok(n) => {
                    in_pipe = in_pipe.saturating_sub(n);
                    add(counter, n);
                    activity.touch();
                }
            }
        }
    }
}

/// Errors meaning "this descriptor does not do splice", as opposed to a connection failure.
fn refuses_splice(e: &io::Error) -> bool {
    let errno = rustix::io::Errno::from_io_error(e);
    errno == Some(rustix::io::Errno::INVAL) || errno == Some(rustix::io::Errno::NOSYS)
}

async fn copy_loop(from: &TcpStream, to: &TcpStream, counter: &AtomicU64, activity: &Activity) {
    let mut buf = vec![0u8; COPY_CHUNK];
    loop {
        let n = match from
            .async_io(Interest::READABLE, || {
                rustix::net::recv(from, buf.as_mut_slice(), RecvFlags::empty())
                    .map(|(n, _)| n)
                    .map_err(io::Error::from)
            })
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut pending = buf.get(..n).unwrap_or_default();
        while !pending.is_empty() {
            match to
                .async_io(Interest::WRITABLE, || {
                    rustix::net::send(to, pending, SendFlags::NOSIGNAL).map_err(io::Error::from)
                })
                .await
            {
                Ok(0) | Err(_) => return,
                Ok(w) => {
                    pending = pending.get(w..).unwrap_or_default();
                    add(counter, w);
                    activity.touch();
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A connected loopback pair.
    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (a, _) = l.accept().await.unwrap();
        (c, a)
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i % 251) as u8 ^ seed.wrapping_mul((i / 4096) as u8))
            .collect()
    }

    /// Client sends `up` bytes and half-closes; only after reading all of them (and their end)
    /// does the server answer with `down` bytes and close. Checks both streams byte for byte
    /// and the counters.
    async fn relays_exactly(mode: Mode) -> Option<(Path, Path)> {
        let (mut client, proxy_client) = pair().await;
        let (proxy_up, mut server) = pair().await;
        let out = AtomicU64::new(0);
        let inn = AtomicU64::new(0);
        let up = pattern(5 << 20, 3);
        let down = pattern(3 << 20, 7);
        let (up2, down2, down3) = (up.clone(), down.clone(), down.clone());
        let server_side = tokio::spawn(async move {
            let mut got = Vec::new();
            server.read_to_end(&mut got).await.unwrap();
            assert!(
                got == up2,
                "the server got other bytes than the client sent"
            );
            server.write_all(&down2).await.unwrap();
            server.shutdown().await.unwrap();
        });
        let client_side = tokio::spawn(async move {
            let (mut r, mut w) = client.split();
            let send = async {
                w.write_all(&up).await.unwrap();
                w.shutdown().await.unwrap();
            };
            let mut got = Vec::new();
            let recv = async { r.read_to_end(&mut got).await.unwrap() };
            tokio::join!(send, recv);
            assert!(
                got == down3,
                "the client got other bytes than the server sent"
            );
        });
        let meters = Meters {
            out: &out,
            inn: &inn,
        };
        let paths = relay(
            &proxy_client,
            &proxy_up,
            meters,
            Duration::from_secs(60),
            mode,
        )
        .await;
        server_side.await.unwrap();
        client_side.await.unwrap();
        assert_eq!(out.load(Ordering::Relaxed), 5 << 20);
        assert_eq!(inn.load(Ordering::Relaxed), down.len() as u64);
        paths
    }

    #[tokio::test]
    async fn splice_relays_both_directions_exactly_with_half_close() {
        let paths = relays_exactly(Mode::Splice).await;
        assert_eq!(paths, Some((Path::Spliced, Path::Spliced)));
    }

    #[tokio::test]
    async fn the_copy_fallback_relays_both_directions_exactly_with_half_close() {
        let paths = relays_exactly(Mode::Copy).await;
        assert_eq!(paths, Some((Path::Copied, Path::Copied)));
    }

    #[tokio::test]
    async fn a_relay_with_no_traffic_ends_at_the_idle_timeout() {
        let (_client, proxy_client) = pair().await;
        let (proxy_up, _server) = pair().await;
        let (out, inn) = (AtomicU64::new(0), AtomicU64::new(0));
        let meters = Meters {
            out: &out,
            inn: &inn,
        };
        let ended = tokio::time::timeout(
            Duration::from_secs(30),
            relay(
                &proxy_client,
                &proxy_up,
                meters,
                Duration::from_millis(200),
                Mode::Splice,
            ),
        )
        .await;
        assert_eq!(ended.ok(), Some(None), "the idle relay was not closed");
    }
}
