//! The HTTP transport's connections, before and around what axum serves: the accept loop on
//! hyper-util's server builder (an HTTP/1 request head must arrive within the header timeout), the
//! cap on connections not yet authenticated (at the cap the oldest one is closed to make room, so
//! idle sockets cannot lock clients out), the deadline for a connection to authenticate, graceful
//! shutdown, and raising the soft `RLIMIT_NOFILE` to the hard limit at start.

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tower::ServiceExt;

/// The limits of connections that have not proved who they are.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// An HTTP/1 request head must be complete this long after the server starts reading it
    /// (an idle keep-alive connection is closed after it too), and a new connection must have
    /// sent an authenticated request head within it.
    pub header_timeout: Duration,
    /// Connections open at once that have not sent an authenticated request yet.
    pub max_unauthenticated: usize,
}

/// The connections not yet authenticated, oldest first; each can be told to close.
#[derive(Debug, Default)]
struct Pending {
    next: u64,
    open: BTreeMap<u64, oneshot::Sender<()>>,
}

/// A connection's handle on the pending set, carried into every request it sends (an extension):
/// the gate marks the connection authenticated once a request passes the token check.
#[derive(Debug, Clone)]
pub struct ConnAuth {
    id: u64,
    pending: Arc<Mutex<Pending>>,
}

impl ConnAuth {
    /// This connection sent a request that passed authentication: it leaves the pending set (no
    /// longer counted against the cap, no authentication deadline).
    pub fn authenticated(&self) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open
            .remove(&self.id);
    }
}

/// Admits a new connection to the pending set; at the cap, the oldest pending connection is told
/// to close. The receiver resolves `Ok` when this one is evicted, `Err` once it authenticated.
fn admit(pending: &Arc<Mutex<Pending>>, cap: usize) -> (ConnAuth, oneshot::Receiver<()>) {
    let (tx, rx) = oneshot::channel();
    let mut p = pending.lock().unwrap_or_else(PoisonError::into_inner);
    while p.open.len() >= cap.max(1) {
        let Some((_, oldest)) = p.open.pop_first() else {
            break;
        };
        let _ = oldest.send(());
    }
    let id = p.next;
    p.next = p.next.wrapping_add(1);
    p.open.insert(id, tx);
    (
        ConnAuth {
            id,
            pending: Arc::clone(pending),
        },
        rx,
    )
}

/// Accepts connections on `listener` and serves `router` on each until `shutdown` completes;
/// then every connection is asked to finish (graceful shutdown) and the future returned
/// resolves once they all closed.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let pending = Arc::new(Mutex::new(Pending::default()));
    let (close_tx, close_rx) = watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (tcp, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE/ENFILE and the like: back off a little instead of spinning.
                    tracing::warn!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // TCP_NODELAY on every accepted connection: an SSE response goes out as a priming event
        // and then the message, two small writes; with Nagle's algorithm the second waits for
        // the client's delayed ACK (~40 ms on Linux loopback) on every request.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY on an accepted connection");
        }
        let (auth, evicted) = admit(&pending, limits.max_unauthenticated);
        let service = {
            let auth = auth.clone();
            router
                .clone()
                .map_request(move |mut req: Request<Incoming>| {
                    req.extensions_mut().insert(auth.clone());
                    req
                })
        };
        let mut close = close_rx.clone();
        tokio::spawn(async move {
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            let conn = builder.serve_connection_with_upgrades(
                TokioIo::new(tcp),
                TowerToHyperService::new(service),
            );
            let mut conn = std::pin::pin!(conn);
            // A connection that sends nothing (or an HTTP/2 preface and nothing authenticated)
            // never reaches hyper's head timer: it must authenticate within the same time.
            let deadline = std::pin::pin!(tokio::time::sleep(limits.header_timeout));
            let mut deadline = deadline;
            let mut evicted = evicted;
            let mut pending = true;
            let mut closing = false;
            loop {
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::debug!(error = %e, "HTTP connection ended with an error");
                        }
                        break;
                    }
                    r = &mut evicted, if pending => match r {
                        Ok(()) => {
                            tracing::warn!(
                                "too many HTTP connections not yet authenticated: closing the oldest"
                            );
                            break;
                        }
                        // Authenticated: off the pending set for good.
                        Err(_) => pending = false,
                    },
                    () = &mut deadline, if pending => {
                        tracing::warn!(
                            "HTTP connection closed: no authenticated request within the header timeout"
                        );
                        break;
                    }
                    r = close.changed(), if !closing => {
                        closing = true;
                        if r.is_ok() {
                            conn.as_mut().graceful_shutdown();
                        }
                    }
                }
            }
            // Dropping the connection closes the socket.
            auth.authenticated();
        });
    }
    drop(listener);
    drop(close_rx);
    close_tx.send_replace(());
    // Every connection task holds a receiver; this resolves when the last one ended.
    close_tx.closed().await;
}

/// Raises the soft limit of open descriptors to the hard limit (a server with many clients
/// needs more than the usual 1 024); returns the limits before and after, or why not.
pub fn raise_fd_limit() -> Result<(u64, u64), String> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let before = getrlimit(Resource::Nofile);
    let soft = before.current.unwrap_or(u64::MAX);
    let Some(hard) = before.maximum else {
        // Unlimited hard limit: the kernel still caps at fs.nr_open; leave the soft one alone.
        return Ok((soft, soft));
    };
    if soft >= hard {
        return Ok((soft, soft));
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(hard),
            maximum: Some(hard),
        },
    )
    .map_err(|e| e.to_string())?;
    Ok((soft, hard))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_oldest_pending_connection_is_told_to_close() {
        let pending = Arc::new(Mutex::new(Pending::default()));
        let (a, mut ra) = admit(&pending, 2);
        let (_b, mut rb) = admit(&pending, 2);
        // The first authenticates: the set has room again, and its receiver says so.
        a.authenticated();
        assert!(matches!(
            ra.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        let (_c, mut rc) = admit(&pending, 2);
        assert!(
            rb.try_recv().is_err(),
            "b is not evicted while there is room"
        );
        let (_d, _rd) = admit(&pending, 2);
        assert_eq!(rb.try_recv(), Ok(()), "b, the oldest pending, is evicted");
        assert!(rc.try_recv().is_err());
        assert_eq!(pending.lock().unwrap().open.len(), 2);
    }

    #[test]
    fn the_soft_fd_limit_is_raised_to_the_hard_one() {
        let (_before, after) = raise_fd_limit().unwrap();
        let now = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        assert_eq!(now.current, Some(after));
        if let Some(hard) = now.maximum {
            assert_eq!(now.current, Some(hard));
        }
    }
}
