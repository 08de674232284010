//! The resource serializer for workspace mutations. A request-owned lease (apply_patch) is
//! exclusive and queues FIFO (bounded); a process-owned lease (a live foreground exec_command)
//! rejects other mutations at once with `WORKSPACE_BUSY` until the process exits: every
//! client's under the workspace scope (the default), only its own client's under the client
//! scope. Background processes and `read`/`find` take no lease.

use crate::error::{ErrorCode, ToolError};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

pub use crate::config::LeaseScope;

/// A live foreground process holding a workspace: its id and the client that started it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProcessHold {
    id: String,
    client: String,
}

/// A queued request: its ticket, its client, its scope and where to send the verdict.
struct Waiter {
    ticket: u64,
    client: String,
    scope: LeaseScope,
    tx: oneshot::Sender<Result<(), ToolError>>,
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter")
            .field("ticket", &self.ticket)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct WsLease {
    /// The request holding the lease (FIFO among requests).
    request: Option<u64>,
    /// Live foreground processes holding it (several only under [`LeaseScope::Client`]).
    processes: Vec<ProcessHold>,
    waiters: VecDeque<Waiter>,
}

impl WsLease {
    /// The process that blocks a request of `client` under `scope`, if any.
    fn blocker(&self, client: &str, scope: LeaseScope) -> Option<&ProcessHold> {
        self.processes
            .iter()
            .find(|p| scope == LeaseScope::Workspace || p.client == client)
    }
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

fn busy_process(ws: &str, holder: &ProcessHold) -> ToolError {
    ToolError::new(
        ErrorCode::WorkspaceBusy,
        format!(
            "workspace `{ws}` is busy: live process {id} holds its mutation lease; to get \
             unstuck, end it (`terminate_process` with process_id `{id}`, or `write_stdin` what \
             it waits for), or wait for it to exit (`read_process` with `wait_ms`); start \
             long-running commands (servers, watchers) with `background: true`, which hold no \
             lease",
            id = holder.id
        ),
    )
}

fn busy_request(ws: &str) -> ToolError {
    ToolError::new(
        ErrorCode::WorkspaceBusy,
        format!(
            "workspace `{ws}` is busy with another mutation (a patch or a starting command); \
             retry when it has finished"
        ),
    )
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
        self.acquire_as(workspace, "", LeaseScope::Workspace).await
    }

    /// [`Leases::acquire`] for a request of `client`: under [`LeaseScope::Client`] only that
    /// client's live processes make it `WORKSPACE_BUSY`.
    pub async fn acquire_as(
        self: &Arc<Self>,
        workspace: &str,
        client: &str,
        scope: LeaseScope,
    ) -> Result<RequestLease, ToolError> {
        let (ticket, rx) = {
            let mut g = self.lock();
            g.next_ticket += 1;
            let ticket = g.next_ticket;
            let max = self.max_waiters;
            let ws = g.by_ws.entry(workspace.to_string()).or_default();
            if let Some(p) = ws.blocker(client, scope) {
                return Err(busy_process(workspace, p));
            }
            if ws.request.is_none() {
                ws.request = Some(ticket);
                return Ok(self.guard(workspace, ticket));
            }
            if ws.waiters.len() >= max {
                return Err(ToolError::new(
                    ErrorCode::ResourceQueueFull,
                    format!("workspace `{workspace}` already has {max} queued mutations"),
                ));
            }
            let (tx, rx) = oneshot::channel();
            ws.waiters.push_back(Waiter {
                ticket,
                client: client.to_string(),
                scope,
                tx,
            });
            (ticket, rx)
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
        if let Some(p) = ws.blocker("", LeaseScope::Workspace) {
            return Err(busy_process(workspace, p));
        }
        if ws.request.is_some() {
            return Err(busy_request(workspace));
        }
        ws.request = Some(ticket);
        Ok(self.guard(workspace, ticket))
    }

    fn guard(self: &Arc<Self>, workspace: &str, ticket: u64) -> RequestLease {
        RequestLease {
            leases: Arc::clone(self),
            workspace: workspace.to_string(),
            ticket,
            released: false,
        }
    }

    /// Hands the request lease to the next live waiter no process blocks (a blocked one gets
    /// `WORKSPACE_BUSY`), or frees it.
    fn hand_over(workspace: &str, ws: &mut WsLease) {
        ws.request = None;
        while let Some(w) = ws.waiters.pop_front() {
            if let Some(p) = ws.blocker(&w.client, w.scope) {
                let _ = w.tx.send(Err(busy_process(workspace, p)));
                continue;
            }
            ws.request = Some(w.ticket);
            if w.tx.send(Ok(())).is_ok() {
                return;
            }
            ws.request = None;
        }
    }

    fn release_request(&self, workspace: &str, ticket: u64) {
        let mut g = self.lock();
        if let Some(ws) = g.by_ws.get_mut(workspace)
            && ws.request == Some(ticket)
        {
            Self::hand_over(workspace, ws);
        }
    }

    /// Releases a process-owned lease (the process exited or was reaped).
    pub fn release_process(&self, workspace: &str, process_id: &str) {
        let mut g = self.lock();
        if let Some(ws) = g.by_ws.get_mut(workspace) {
            ws.processes.retain(|p| p.id != process_id);
        }
    }

    /// Releases every process-owned lease of `workspace`: its worker died or disconnected, and
    /// its processes with it (the environment's disconnect hook). Returns the released ids.
    pub fn release_all_processes(&self, workspace: &str) -> Vec<String> {
        let mut g = self.lock();
        match g.by_ws.get_mut(workspace) {
            Some(ws) => ws.processes.drain(..).map(|p| p.id).collect(),
            None => Vec::new(),
        }
    }

    /// Releases the lease a process's exec took, once the process exited: whether the exec
    /// already turned it into the process's lease or still holds it as request `ticket` (the
    /// process exited before the exec finished registering it). Runs from the process table's
    /// exit hook, before anyone can observe the exit.
    pub fn release_exited(&self, workspace: &str, process_id: &str, ticket: u64) {
        let mut g = self.lock();
        if let Some(ws) = g.by_ws.get_mut(workspace) {
            ws.processes.retain(|p| p.id != process_id);
            if ws.request == Some(ticket) {
                Self::hand_over(workspace, ws);
            }
        }
    }

    /// The live process holding the workspace, if any (the first when several do).
    pub fn process_holder(&self, workspace: &str) -> Option<String> {
        let g = self.lock();
        g.by_ws
            .get(workspace)
            .and_then(|w| w.processes.first())
            .map(|p| p.id.clone())
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
    pub fn into_process(self, process_id: &str) {
        self.into_process_of(process_id, "");
    }

    /// [`RequestLease::into_process`] for a process of `client`: queued requests it blocks fail
    /// with `WORKSPACE_BUSY`, the next one it does not block (another client's, under
    /// [`LeaseScope::Client`]) gets the request lease.
    pub fn into_process_of(mut self, process_id: &str, client: &str) {
        let mut g = self.leases.lock();
        if let Some(ws) = g.by_ws.get_mut(&self.workspace)
            && ws.request == Some(self.ticket)
        {
            ws.processes.push(ProcessHold {
                id: process_id.to_string(),
                client: client.to_string(),
            });
            Leases::hand_over(&self.workspace, ws);
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

    #[tokio::test]
    async fn client_scope_blocks_only_the_processs_own_client() {
        let l = Leases::new(64);
        let g = l.acquire_as("w", "a", LeaseScope::Client).await.unwrap();
        g.into_process_of("proc-a", "a");
        let err = l
            .acquire_as("w", "a", LeaseScope::Client)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::WorkspaceBusy);
        assert!(err.message.contains("proc-a"), "{}", err.message);
        // Another client mutates beside it; under the workspace scope it could not.
        drop(l.acquire_as("w", "b", LeaseScope::Client).await.unwrap());
        assert_eq!(
            l.acquire_as("w", "b", LeaseScope::Workspace)
                .await
                .unwrap_err()
                .code,
            ErrorCode::WorkspaceBusy
        );
        // A waiter of another client survives the conversion and gets the lease next.
        let first = l.acquire_as("w", "b", LeaseScope::Client).await.unwrap();
        let waiter = tokio::spawn({
            let l = Arc::clone(&l);
            async move { l.acquire_as("w", "c", LeaseScope::Client).await.map(|_| ()) }
        });
        while l.waiters("w") < 1 {
            tokio::task::yield_now().await;
        }
        first.into_process_of("proc-b", "b");
        waiter.await.unwrap().unwrap();
        l.release_process("w", "proc-a");
        drop(l.acquire_as("w", "a", LeaseScope::Client).await.unwrap());
    }

    #[tokio::test]
    async fn an_exit_before_the_conversion_frees_the_request_lease() {
        let l = Leases::new(64);
        let g = l.acquire("w").await.unwrap();
        l.release_exited("w", "proc-1", g.ticket());
        drop(l.acquire("other").await.unwrap());
        // The exec finishes registering the process after its exit: nothing stays held.
        g.into_process("proc-1");
        drop(l.acquire("w").await.unwrap());
    }
}
