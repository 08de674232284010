//! The resource serializer for workspace mutations. A request-owned lease (apply_patch) is
//! exclusive and queues FIFO (bounded); a process-owned lease (a live exec_command) rejects
//! every other mutation at once with `WORKSPACE_BUSY` until the process exits. `read` and `find`
//! take no lease.

use crate::error::{ErrorCode, ToolError};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Holder {
    Request(u64),
    Process(String),
}

type Waiter = (u64, oneshot::Sender<Result<(), ToolError>>);

#[derive(Debug, Default)]
struct WsLease {
    holder: Option<Holder>,
    waiters: VecDeque<Waiter>,
}

#[derive(Debug, Default)]
struct Inner {
    next_ticket: u64,
    by_ws: HashMap<String, WsLease>,
}

/// The leases of every workspace.
#[derive(Debug)]
pub struct Leases {
    inner: Mutex<Inner>,
    max_waiters: usize,
}

/// A held request-owned lease; dropping it releases the lease to the next waiter.
#[derive(Debug)]
pub struct RequestLease {
    leases: Arc<Leases>,
    workspace: String,
    ticket: u64,
    released: bool,
}

fn busy(ws: &str, holder: &Holder) -> ToolError {
    match holder {
        Holder::Process(pid) => ToolError::new(
            ErrorCode::WorkspaceBusy,
            format!("workspace `{ws}` is busy: live process {pid} holds its mutation lease"),
        ),
        Holder::Request(_) => ToolError::new(
            ErrorCode::WorkspaceBusy,
            format!("workspace `{ws}` is busy with another mutation"),
        ),
    }
}

impl Leases {
    /// Leases with at most `max_waiters` queued requests per workspace.
    pub fn new(max_waiters: usize) -> Arc<Leases> {
        Arc::new(Leases {
            inner: Mutex::new(Inner::default()),
            max_waiters,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Takes the workspace's lease for a request, waiting FIFO behind other requests.
    /// `WORKSPACE_BUSY` at once when a live process holds it; `RESOURCE_QUEUE_FULL` when the
    /// queue is full.
    pub async fn acquire(self: &Arc<Self>, workspace: &str) -> Result<RequestLease, ToolError> {
        let (ticket, rx) = {
            let mut g = self.lock();
            g.next_ticket += 1;
            let ticket = g.next_ticket;
            let max = self.max_waiters;
            let ws = g.by_ws.entry(workspace.to_string()).or_default();
            match &ws.holder {
                None => {
                    ws.holder = Some(Holder::Request(ticket));
                    return Ok(self.guard(workspace, ticket));
                }
                Some(h @ Holder::Process(_)) => return Err(busy(workspace, h)),
                Some(Holder::Request(_)) => {
                    if ws.waiters.len() >= max {
                        return Err(ToolError::new(
                            ErrorCode::ResourceQueueFull,
                            format!("workspace `{workspace}` already has {max} queued mutations"),
                        ));
                    }
                    let (tx, rx) = oneshot::channel();
                    ws.waiters.push_back((ticket, tx));
                    (ticket, rx)
                }
            }
        };
        // If this future is dropped while waiting, the sender fails on hand-over and the lease
        // moves on to the next waiter.
        match rx.await {
            Ok(Ok(())) => Ok(self.guard(workspace, ticket)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ToolError::new(
                ErrorCode::Internal,
                "lease queue closed unexpectedly",
            )),
        }
    }

    /// Takes the lease for a request without waiting (`WORKSPACE_BUSY` when held).
    pub fn try_acquire(self: &Arc<Self>, workspace: &str) -> Result<RequestLease, ToolError> {
        let mut g = self.lock();
        g.next_ticket += 1;
        let ticket = g.next_ticket;
        let ws = g.by_ws.entry(workspace.to_string()).or_default();
        match &ws.holder {
            None => {
                ws.holder = Some(Holder::Request(ticket));
                Ok(self.guard(workspace, ticket))
            }
            Some(h) => Err(busy(workspace, h)),
        }
    }

    fn guard(self: &Arc<Self>, workspace: &str, ticket: u64) -> RequestLease {
        RequestLease {
            leases: Arc::clone(self),
            workspace: workspace.to_string(),
            ticket,
            released: false,
        }
    }

    /// Hands the lease to the next live waiter, or frees it.
    fn hand_over(ws: &mut WsLease) {
        ws.holder = None;
        while let Some((ticket, tx)) = ws.waiters.pop_front() {
            ws.holder = Some(Holder::Request(ticket));
            if tx.send(Ok(())).is_ok() {
                return;
            }
            ws.holder = None;
        }
    }

    fn release_request(&self, workspace: &str, ticket: u64) {
        let mut g = self.lock();
        if let Some(ws) = g.by_ws.get_mut(workspace)
            && ws.holder == Some(Holder::Request(ticket))
        {
            Self::hand_over(ws);
        }
    }

    /// Releases a process-owned lease (the process exited or was reaped).
    pub fn release_process(&self, workspace: &str, process_id: &str) {
        let mut g = self.lock();
        if let Some(ws) = g.by_ws.get_mut(workspace)
            && ws.holder == Some(Holder::Process(process_id.to_string()))
        {
            Self::hand_over(ws);
        }
    }

    /// Releases the lease a process's exec took, once the process exited: whether the exec
    /// already turned it into the process's lease (`Process(id)`) or still holds it as request
    /// `ticket` (the process exited before the exec finished registering it). Runs from the
    /// process table's exit hook, before anyone can observe the exit.
    pub fn release_exited(&self, workspace: &str, process_id: &str, ticket: u64) {
        let mut g = self.lock();
        if let Some(ws) = g.by_ws.get_mut(workspace)
            && (ws.holder == Some(Holder::Process(process_id.to_string()))
                || ws.holder == Some(Holder::Request(ticket)))
        {
            Self::hand_over(ws);
        }
    }

    /// The live process holding the workspace, if any.
    pub fn process_holder(&self, workspace: &str) -> Option<String> {
        let g = self.lock();
        match g.by_ws.get(workspace).and_then(|w| w.holder.clone()) {
            Some(Holder::Process(p)) => Some(p),
            _ => None,
        }
    }

    /// Number of queued waiters (for tests and workspace_info).
    pub fn waiters(&self, workspace: &str) -> usize {
        self.lock()
            .by_ws
            .get(workspace)
            .map_or(0, |w| w.waiters.len())
    }
}

impl RequestLease {
    /// The ticket this lease holds (see [`Leases::release_exited`]).
    pub fn ticket(&self) -> u64 {
        self.ticket
    }

    /// Turns this request-owned lease into a process-owned one: the process now holds the
    /// workspace until [`Leases::release_process`]; queued requests fail with `WORKSPACE_BUSY`.
    pub fn into_process(mut self, process_id: &str) {
        let mut g = self.leases.lock();
        if let Some(ws) = g.by_ws.get_mut(&self.workspace)
            && ws.holder == Some(Holder::Request(self.ticket))
        {
            let holder = Holder::Process(process_id.to_string());
            for (_, tx) in ws.waiters.drain(..) {
                let _ = tx.send(Err(busy(&self.workspace, &holder)));
            }
            ws.holder = Some(holder);
            self.released = true;
        }
    }
}

impl Drop for RequestLease {
    fn drop(&mut self) {
        if !self.released {
            self.leases.release_request(&self.workspace, self.ticket);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn requests_wait_fifo() {
        let l = Leases::new(64);
        let first = l.acquire("w").await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..5 {
            let lc = Arc::clone(&l);
            let order = Arc::clone(&order);
            tasks.push(tokio::spawn(async move {
                let _g = lc.acquire("w").await.unwrap();
                order.lock().unwrap().push(i);
            }));
            // Queue them in a known order.
            while l.waiters("w") < i + 1 {
                tokio::task::yield_now().await;
            }
        }
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    }

    #[tokio::test]
    async fn queue_is_bounded() {
        let l = Leases::new(2);
        let _held = l.acquire("w").await.unwrap();
        let a = tokio::spawn({
            let l = Arc::clone(&l);
            async move { l.acquire("w").await.map(|_| ()) }
        });
        let b = tokio::spawn({
            let l = Arc::clone(&l);
            async move { l.acquire("w").await.map(|_| ()) }
        });
        while l.waiters("w") < 2 {
            tokio::task::yield_now().await;
        }
        let err = l.acquire("w").await.unwrap_err();
        assert_eq!(err.code, ErrorCode::ResourceQueueFull);
        a.abort();
        b.abort();
    }

    #[tokio::test]
    async fn process_lease_rejects_and_fails_waiters() {
        let l = Leases::new(64);
        let g = l.acquire("w").await.unwrap();
        let waiter = tokio::spawn({
            let l = Arc::clone(&l);
            async move { l.acquire("w").await.map(|_| ()) }
        });
        while l.waiters("w") < 1 {
            tokio::task::yield_now().await;
        }
        g.into_process("proc-1");
        let err = waiter.await.unwrap().unwrap_err();
        assert_eq!(err.code, ErrorCode::WorkspaceBusy);
        assert_eq!(
            l.acquire("w").await.unwrap_err().code,
            ErrorCode::WorkspaceBusy
        );
        assert_eq!(l.process_holder("w").as_deref(), Some("proc-1"));
        // Other workspaces are independent.
        drop(l.acquire("other").await.unwrap());
        l.release_process("w", "proc-1");
        drop(l.acquire("w").await.unwrap());
    }

    #[tokio::test]
    async fn cancelled_waiter_does_not_block_the_queue() {
        let l = Leases::new(64);
        let g = l.acquire("w").await.unwrap();
        let cancelled = tokio::spawn({
            let l = Arc::clone(&l);
            async move { l.acquire("w").await.map(|_| ()) }
        });
        while l.waiters("w") < 1 {
            tokio::task::yield_now().await;
        }
        cancelled.abort();
        let _ = cancelled.await;
        drop(g);
        let got = tokio::time::timeout(Duration::from_secs(5), l.acquire("w")).await;
        assert!(got.is_ok(), "lease must be free after the cancelled waiter");
    }
}
