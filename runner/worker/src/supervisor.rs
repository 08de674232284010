//! [`Supervisor`]: owns how to reach a worker, connects on the first call, reconnects on the
//! next call after a death (exponential backoff, capped, after failed attempts), reports each
//! disconnect once, and keeps the state `workspace_info` shows.

use crate::WorkerError;
use crate::client::{Client, CloseSignal, EventReceiver};
use futures_util::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// How a supervisor reaches its worker: a fresh connection each time it is called.
pub type ConnectFn<Req, Resp, Ev> = Arc<
    dyn Fn() -> BoxFuture<'static, Result<(Client<Req, Resp, Ev>, EventReceiver<Ev>), WorkerError>>
        + Send
        + Sync,
>;

/// Called once per lost connection, with the reason (the engine marks processes `lost`).
pub type DisconnectFn = Arc<dyn Fn(&str) + Send + Sync>;

/// Where the worker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    /// A live connection.
    Connected,
    /// A connection attempt is under way.
    Connecting,
    /// No connection (never made, or lost); the next call tries again.
    Down,
}

/// The state for `workspace_info.environment.worker`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerStatus {
    /// Where the worker is.
    pub state: WorkerState,
    /// `<protocol>/<build>` of the last worker reached.
    pub version: Option<String>,
    /// Successful connections after the first.
    pub restarts: u64,
    /// Why the last connection ended or the last attempt failed.
    pub last_error: Option<String>,
}

struct Inner<Req, Resp, Ev> {
    client: Option<Arc<Client<Req, Resp, Ev>>>,
    /// A call succeeded on the current connection (a death then is not a crash loop).
    proved: bool,
    status: WorkerStatus,
    connects: u64,
    failures: u32,
    retry_at: Option<Instant>,
    /// One per connection: each reports its connection's end once.
    watchers: Vec<AbortHandle>,
}

/// Owns the connection to one worker.
pub struct Supervisor<Req, Resp, Ev> {
    connect: ConnectFn<Req, Resp, Ev>,
    on_disconnect: DisconnectFn,
    inner: Arc<Mutex<Inner<Req, Resp, Ev>>>,
    connecting: tokio::sync::Mutex<()>,
    events_tx: mpsc::Sender<Ev>,
    events_rx: Mutex<Option<mpsc::Receiver<Ev>>>,
    base: Duration,
    cap: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<Req, Resp, Ev> Drop for Supervisor<Req, Resp, Ev> {
    fn drop(&mut self) {
        for w in lock(&self.inner).watchers.drain(..) {
            w.abort();
        }
    }
}

impl<Req, Resp, Ev> Supervisor<Req, Resp, Ev>
where
    Req: Serialize + Send + Sync + 'static,
    Resp: DeserializeOwned + Send + 'static,
    Ev: DeserializeOwned + Send + 'static,
{
    /// A supervisor that connects with `connect` (not yet called) and reports deaths to
    /// `on_disconnect`. Backoff: 100 ms doubling up to 30 s.
    pub fn new(connect: ConnectFn<Req, Resp, Ev>, on_disconnect: DisconnectFn) -> Self {
        let (events_tx, events_rx) = mpsc::channel(crate::client::EVENT_QUEUE);
        Supervisor {
            connect,
            on_disconnect,
            inner: Arc::new(Mutex::new(Inner {
                client: None,
                proved: false,
                status: WorkerStatus {
                    state: WorkerState::Down,
                    version: None,
                    restarts: 0,
                    last_error: None,
                },
                connects: 0,
                failures: 0,
                retry_at: None,
                watchers: Vec::new(),
            })),
            connecting: tokio::sync::Mutex::new(()),
            events_tx,
            events_rx: Mutex::new(Some(events_rx)),
            base: Duration::from_millis(100),
            cap: Duration::from_secs(30),
        }
    }

    /// Sets the backoff: `base` after the first failure, doubling up to `cap`.
    pub fn with_backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.base = base;
        self.cap = cap;
        self
    }

    /// The events of every connection, in one queue (taken once).
    pub fn take_events(&self) -> Option<mpsc::Receiver<Ev>> {
        lock(&self.events_rx).take()
    }

    /// The state now.
    pub fn status(&self) -> WorkerStatus {
        lock(&self.inner).status.clone()
    }

    /// Calls the worker, connecting first when there is no live connection. A connection that
    /// dies under the call fails it with `Disconnected`; the next call reconnects.
    pub async fn call(&self, req: &Req) -> Result<Resp, WorkerError> {
        let client = self.client().await?;
        let r = client.call(req).await;
        if r.is_ok() {
            let mut g = lock(&self.inner);
            if g.client.as_ref().is_some_and(|c| Arc::ptr_eq(c, &client)) {
                g.proved = true;
            }
        }
        r
    }

    fn live(&self) -> Option<Arc<Client<Req, Resp, Ev>>> {
        lock(&self.inner)
            .client
            .as_ref()
            .filter(|c| !c.is_closed())
            .cloned()
    }

    /// The live connection, or a new one.
    pub async fn client(&self) -> Result<Arc<Client<Req, Resp, Ev>>, WorkerError> {
        if let Some(c) = self.live() {
            return Ok(c);
        }
        let _one = self.connecting.lock().await;
        if let Some(c) = self.live() {
            return Ok(c);
        }
        {
            let mut g = lock(&self.inner);
            if let Some(at) = g.retry_at {
                let now = Instant::now();
                if now < at {
                    return Err(WorkerError::Unavailable {
                        reason: g.status.last_error.clone().unwrap_or_default(),
                        retry_in_ms: u64::try_from((at - now).as_millis()).unwrap_or(u64::MAX),
                    });
                }
            }
            g.status.state = WorkerState::Connecting;
        }
        match (self.connect)().await {
            Ok((client, events)) => Ok(self.adopt(client, events)),
            Err(e) => {
                let mut g = lock(&self.inner);
                g.failures = g.failures.saturating_add(1);
                g.retry_at = Some(Instant::now() + self.backoff(g.failures));
                g.status.state = WorkerState::Down;
                g.status.last_error = Some(e.to_string());
                Err(e)
            }
        }
    }

    fn backoff(&self, failures: u32) -> Duration {
        let shift = failures.saturating_sub(1).min(20);
        self.base.saturating_mul(1u32 << shift).min(self.cap)
    }

    fn adopt(
        &self,
        client: Client<Req, Resp, Ev>,
        mut events: EventReceiver<Ev>,
    ) -> Arc<Client<Req, Resp, Ev>> {
        let client = Arc::new(client);
        let closed: CloseSignal = client.close_signal();
        let weak = Arc::downgrade(&client);
        let mut g = lock(&self.inner);
        g.connects += 1;
        g.status = WorkerStatus {
            state: WorkerState::Connected,
            version: Some(client.peer().label()),
            restarts: g.connects.saturating_sub(1),
            last_error: g.status.last_error.take(),
        };
        g.client = Some(client.clone());
        g.proved = false;
        g.retry_at = None;

        let inner = self.inner.clone();
        let on_disconnect = self.on_disconnect.clone();
        let events_tx = self.events_tx.clone();
        let (base, cap) = (self.base, self.cap);
        let watcher = tokio::spawn(async move {
            let forward = async {
                while let Some(ev) = events.recv().await {
                    if events_tx.send(ev).await.is_err() {
                        break;
                    }
                }
                std::future::pending::<()>().await;
            };
            let mut reason = tokio::select! {
                r = closed.wait() => r,
                _ = forward => String::new(),
            };
            if let Some(c) = weak.upgrade()
                && let Some(d) = c.transport_detail()
            {
                reason = format!("{reason}; its stderr: {d}");
            }
            {
                let mut g = lock(&inner);
                let current = g
                    .client
                    .as_ref()
                    .is_some_and(|c| std::ptr::eq(Arc::as_ptr(c), weak.as_ptr()));
                if current {
                    g.client = None;
                    g.status.state = WorkerState::Down;
                    g.status.last_error = Some(reason.clone());
                    if g.proved {
                        g.failures = 0;
                    } else {
                        // Died before answering anything: a crash loop backs off.
                        g.failures = g.failures.saturating_add(1);
                        let shift = g.failures.saturating_sub(1).min(20);
                        g.retry_at =
                            Some(Instant::now() + base.saturating_mul(1u32 << shift).min(cap));
                    }
                }
            }
            on_disconnect(&reason);
        });
        // An older connection's watcher may still be reporting its end: keep it.
        g.watchers.retain(|w| !w.is_finished());
        g.watchers.push(watcher.abort_handle());
        client
    }
}
