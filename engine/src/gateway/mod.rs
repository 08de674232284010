//! The gateway: the one choke point every tool call passes. parse (in the transport) → build
//! the Cedar request(s) → decide → audit → run the runner → reply.

use crate::config::Config;
use crate::error::{ErrorCode, ToolError};
use crate::facts::SandboxFacts;
use crate::lease::Leases;
use crate::policy::{PolicySnapshot, PolicyStore};
use crate::request::{ProcessFacts, Session, WorkspaceFacts};
use crate::wire::ToolCall;

pub mod approvals;
mod authorized;
mod environment;
mod explain;
mod hold_summary;
pub mod holds;
mod info;
mod masks;
pub mod net;
pub mod ops;
pub mod patches;
pub mod processes;
pub mod remote;
pub mod temp_files;
mod write_scope;
pub(crate) use authorized::{Authorized, Decided};
use codespace_policy::Decider;
use codespace_runner_fs::Root;
use codespace_store::Store;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A workspace root could not be opened.
    #[error("workspace {0}: root cannot be opened: {1}")]
    Root(String, String),
    /// The store could not record this server instance.
    #[error("cannot record the server instance in the store: {0}")]
    Store(String),
    /// The workspace could not be registered in the store.
    #[error("workspace {0}: cannot be registered in the store: {1}")]
    Register(String, String),
    /// A path commands may read or write reaches the store.
    #[error("{0}")]
    StoreReachable(String),
    /// An environment's worker transport could not be prepared.
    #[error("{0}")]
    Environment(String),
}

/// One registered workspace at run time.
#[derive(Debug)]
pub(crate) struct WorkspaceRuntime {
    pub(crate) facts: WorkspaceFacts,
    /// The opened root when the workspace's files are on this host (`host`, `linux-container`);
    /// `None` when they are a worker's: then the engine reaches them only through `runner`.
    pub(crate) root: Option<Arc<Root>>,
    pub(crate) versions: Arc<crate::versions::Versions>,
    /// The path index `find`, `grep` and `find_files` read (fed by the versions watcher).
    pub(crate) index: Arc<crate::index::PathIndex>,
    /// The runner of the workspace's environment: everything the handlers ask after a decision
    /// goes through it (the gateway's one [`HostRunner`] for `host`, a [`RemoteRunner`] over the
    /// environment's worker otherwise).
    ///
    /// [`HostRunner`]: crate::host_runner::HostRunner
    /// [`RemoteRunner`]: codespace_runner_api::RemoteRunner
    pub(crate) runner: Arc<dyn codespace_runner_api::Runner>,
    /// The workspace identity: the store's registration of this id bound to this root
    /// (operation keys and patch journals are scoped to it); empty without a store.
    pub(crate) registration: String,
    /// A worker's workspace whose runner is connected (set when a client is attached): the
    /// environment gate lets its calls through.
    pub(crate) runner_attached: bool,
    /// The worker connection whose journals were last recovered (its restart count; `u64::MAX`:
    /// none yet): a new connection recovers before it serves a call.
    pub(crate) recovered_for: std::sync::atomic::AtomicU64,
    /// Operations of this server committing through the runner now: recovery leaves their
    /// journals alone.
    pub(crate) applying: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl WorkspaceRuntime {
    /// The runtime of a worker's workspace served by `runner`: no host root, a path index
    /// listing through the runner, a version table that never watches the host.
    pub(crate) fn remote(
        facts: WorkspaceFacts,
        runner: Arc<dyn codespace_runner_api::Runner>,
        registration: String,
        max_walk_entries: usize,
    ) -> WorkspaceRuntime {
        let files = crate::index::RunnerFiles {
            runner: Arc::clone(&runner),
            workspace: facts.id.clone(),
        };
        WorkspaceRuntime {
            index: Arc::new(crate::index::PathIndex::new_remote(files, max_walk_entries)),
            versions: Arc::new(crate::versions::Versions::remote()),
            facts,
            root: None,
            runner,
            registration,
            runner_attached: false,
            recovered_for: std::sync::atomic::AtomicU64::new(u64::MAX),
            applying: std::sync::Mutex::default(),
        }
    }

    /// True for a worker's workspace: its files are reached only through `runner`.
    pub(crate) fn is_remote(&self) -> bool {
        self.root.is_none()
    }

    /// The host root of a workspace whose files are on this host; `ENVIRONMENT_UNAVAILABLE`
    /// for a worker's workspace (nothing of it is ever opened on the host).
    pub(crate) fn host_root(&self) -> Result<&Arc<Root>, ToolError> {
        self.root.as_ref().ok_or_else(|| {
            ToolError::new(
                ErrorCode::EnvironmentUnavailable,
                format!(
                    "workspace `{}`: this is not served through its environment's worker in this build",
                    self.facts.id
                ),
            )
        })
    }

    /// Fills `links` of every sub-request that names a path: beneath the host root, or for a
    /// worker's workspace from the worker's `stat` (a path it cannot stat, or a worker that
    /// cannot be reached, says 0; the call then fails on the same path or at the gate).
    pub(crate) async fn fill_links(
        &self,
        reqs: &mut Vec<crate::request::SubRequest>,
    ) -> Result<(), ToolError> {
        crate::links::fill_links_via(self.root.as_ref(), &*self.runner, &self.facts.id, reqs).await
    }
}

/// What tool handlers may use besides their decision: the operator's config, the store, the
/// runners' shared state. Nothing here decides: the policy store, the decision caches and the
/// workspaces' runtimes stay private to the gateway.
#[derive(Debug)]
pub struct Services {
    pub(crate) config: Config,
    pub(crate) store: Option<Arc<Store>>,
    pub(crate) sandbox: SandboxFacts,
    pub(crate) transports: Vec<String>,
    pub(crate) leases: Arc<Leases>,
    pub(crate) patch_hooks: Arc<crate::gateway::patches::PatchHooks>,
    pub(crate) processes: crate::processes::Processes,
    pub(crate) temps: Arc<codespace_runner_fs::TempNames>,
    /// The store statistics the retention pruner last computed.
    pub(crate) store_stats: crate::retention::StatsCell,
    /// `network: proxy`: what every process's egress-proxy decider shares.
    pub(crate) net: Arc<crate::gateway::net::Egress>,
    /// The in-process runner of the `host` (and `linux-container`) environments.
    pub(crate) host: Arc<crate::host_runner::HostRunner>,
    /// The worker of every environment served by one (kinds worker, ssh, container,
    /// kubernetes, command), by environment id.
    pub(crate) workers: BTreeMap<String, Arc<crate::worker_wire::EnvironmentWorker>>,
}

/// The gateway: the one place that resolves a call's target, decides it and audits it. Tool
/// handlers get an [`Authorized`] value from it and never the gateway itself.
#[derive(Debug)]
pub struct Gateway {
    svc: Services,
    pub(crate) policy: Arc<PolicyStore>,
    pub(crate) workspaces: BTreeMap<String, WorkspaceRuntime>,
    /// The one way to a decision (shared with the egress proxy).
    decider: Arc<Decider>,
}

impl std::ops::Deref for Gateway {
    type Target = Services;
    fn deref(&self) -> &Services {
        &self.svc
    }
}

/// The identity of a workspace root: `"<st_dev>:<st_ino>"` of the opened root directory.
fn root_id(root: &Root) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let fd = root
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| e.to_string())?;
    let meta = std::fs::File::from(fd)
        .metadata()
        .map_err(|e| e.to_string())?;
    Ok(format!("{}:{}", meta.dev(), meta.ino()))
}

/// Decides `read_skill` for each operator skill of `names` (issue 31), audited like a call.
/// Skills are server-wide but a Cedar request needs a workspace, so each skill is asked under
/// every configured workspace (its profile the principal) and is allowed only when all of
/// them allow it: the most restrictive answer, and no workspace means no skill. One decision
/// per workspace carries one sub-request per skill.
pub fn skills_allowed(gateway: &Gateway, session: &Session, names: &[String]) -> Vec<bool> {
    let mut allowed = vec![!gateway.workspaces.is_empty(); names.len()];
    if names.is_empty() {
        return allowed;
    }
    let snap = gateway.policy.snapshot();
    let reqs: Vec<_> = names
        .iter()
        .map(|n| crate::request::skill_request(session, n))
        .collect();
    for ws in gateway.workspaces.values() {
        let d = gateway.decider.decide(
            &snap,
            &ws.facts,
            crate::policy::Action::ReadSkill.as_str(),
            &reqs,
            session,
        );
        for (i, slot) in allowed.iter_mut().enumerate() {
            let yes = d.subs.iter().any(|s| s.index == i && s.allowed);
            *slot = *slot && yes;
        }
    }
    allowed
}

/// Saves every workspace's path index of `gateway` in the store (a clean shutdown: the next start
/// takes it back once checked against the disk instead of walking). Runs on the blocking pool.
pub async fn save_path_indexes(gateway: &Gateway) {
    let all: Vec<_> = gateway
        .workspaces
        .values()
        .map(|w| (Arc::clone(&w.index), Arc::clone(&w.versions)))
        .collect();
    let saved = tokio::task::spawn_blocking(move || {
        for (index, versions) in all {
            index.persist(&versions);
        }
    });
    if let Err(e) = saved.await {
        tracing::warn!(error = %e, "saving the path indexes failed");
    }
}

impl Gateway {
    /// Builds the gateway: records this server instance in the store (its id names the server's
    /// temporary files), opens every workspace root and computes its facts.
    pub fn new(
        config: Config,
        policy: Arc<PolicyStore>,
        store: Option<Arc<Store>>,
        sandbox: SandboxFacts,
    ) -> Result<Gateway, StartError> {
        crate::isolation::check_store_unreachable(&config).map_err(StartError::StoreReachable)?;
        let config_max_waiters = config.limits.max_waiters;
        let processes = crate::processes::Processes::new(&config.limits);
        let temps = crate::gateway::temp_files::start_instance(store.as_ref())?;
        let owned_files = crate::server_files::server_files(&config, policy.source());
        let mut workspaces = BTreeMap::new();
        // File reads off the async workers, versions cached by file identity: the host
        // runner's.
        let host = Arc::new(crate::host_runner::HostRunner::new(
            Arc::new(crate::file_versions::FileVersions::new()),
            crate::processes::table_limits(&config.limits),
            None,
        ));
        host.set_force_no_landlock(processes.force_no_landlock);
        // The path indexes' fence directories, beside the store (dead servers' ones swept now).
        let fences = crate::fence_dirs::prepare(config.store.as_deref());
        let leases = Leases::new(config_max_waiters);
        let workers = crate::worker_wire::workers_of(&config, store.as_ref(), &leases)
            .map_err(StartError::Environment)?;
        // A worker's disconnect hook: the process registry forgets its live processes (lost;
        // leases and store rows, idempotently with the worker's own hook).
        for (env_id, worker) in &workers {
            let (registry, leases, store, env_id) = (
                Arc::clone(&processes.registry),
                Arc::clone(&leases),
                store.clone(),
                env_id.clone(),
            );
            worker.on_lost(Arc::new(move |_workspaces: &[String], _reason: &str| {
                let lost = registry.lose_environment(&env_id);
                crate::processes::record_lost(&leases, store.as_ref(), &lost);
            }));
        }
        let mut remote_runners: BTreeMap<String, Arc<dyn codespace_runner_api::Runner>> =
            BTreeMap::new();
        for (id, ws) in &config.workspaces {
            let env_spec = config
                .environments
                .get(&ws.environment)
                .map(|e| e.spec.clone())
                .unwrap_or_default();
            // A workspace of a worker's environment: its root is the worker's path, never
            // opened here (it has no host root at all: its files are reached only through its
            // runner, see `remote.rs`).
            let worker = workers.get(&ws.environment);
            let root = if matches!(
                env_spec,
                crate::config::EnvironmentSpec::Host
                    | crate::config::EnvironmentSpec::LinuxContainer
            ) {
                Some(Arc::new(
                    Root::open(&ws.root)
                        .map_err(|e| StartError::Root(id.clone(), e.to_string()))?
                        .with_temp_names(Arc::clone(&temps)),
                ))
            } else {
                None
            };
            let registration = match &store {
                Some(store) => {
                    let rid = match &root {
                        Some(root) => root_id(root).map_err(|e| StartError::Root(id.clone(), e))?,
                        None => format!("environment:{}:{}", ws.environment, ws.root.display()),
                    };
                    store
                        .register_workspace(id, &rid, &format!("reg-{}", uuid::Uuid::new_v4()))
                        .map_err(|e| StartError::Register(id.clone(), e.to_string()))?
                }
                None => String::new(),
            };
            let facts = WorkspaceFacts {
                id: id.clone(),
                profile: ws.profile.clone(),
                environment: ws.environment.clone(),
                environment_kind: env_spec.kind(),
                environment_transport: env_spec.transport(),
                environment_host: env_spec.host_fact(),
                sandbox: if sandbox.sandbox_enforced {
                    crate::facts::SandboxFact::Enforced
                } else {
                    crate::facts::SandboxFact::Unavailable
                },
                // A workspace whose operator turned the sandbox off has no network enforcement.
                network_enforcement: if sandbox.network_enforced
                    && ws.sandbox == crate::config::SandboxMode::Required
                {
                    crate::facts::NetworkEnforcement::Enforced
                } else {
                    crate::facts::NetworkEnforcement::None
                },
                network: ws.network,
                approvals: ws.approvals,
                server_owned: crate::server_files::server_owned_in(&ws.root, &owned_files),
                workspace_sandbox: ws.sandbox,
                secret_masking: crate::masks::masking_fact(ws.secret_masking, sandbox),
            };
            let Some(root) = root else {
                let runner = match worker {
                    Some(w) => {
                        Arc::clone(remote_runners.entry(ws.environment.clone()).or_insert_with(
                            || {
                                Arc::new(codespace_runner_api::RemoteRunner::new(
                                    crate::worker_wire::WorkerWire(Arc::clone(w)),
                                ))
                            },
                        ))
                    }
                    None => crate::worker_wire::no_worker(),
                };
                let runtime = WorkspaceRuntime::remote(
                    facts,
                    runner,
                    registration,
                    config.limits.max_walk_entries,
                );
                workspaces.insert(id.clone(), runtime);
                continue;
            };
            host.add_workspace(id, Arc::clone(&root), ws.root.clone());
            let runner = Arc::clone(&host) as Arc<dyn codespace_runner_api::Runner>;
            let mut index = crate::index::PathIndex::new_in(
                Arc::clone(&root),
                &ws.root,
                config.limits.max_walk_entries,
                fences.as_deref(),
            );
            if let Some(store) = &store {
                index = index.saved_in(Arc::clone(store), &registration);
            }
            let index = Arc::new(index);
            workspaces.insert(
                id.clone(),
                WorkspaceRuntime {
                    facts,
                    root: Some(root),
                    versions: Arc::new(crate::versions::Versions::with_observer(
                        &ws.root,
                        Arc::clone(&temps),
                        index.observer(),
                        index.fence_dir(),
                    )),
                    index,
                    runner,
                    registration,
                    runner_attached: false,
                    recovered_for: std::sync::atomic::AtomicU64::new(u64::MAX),
                    applying: std::sync::Mutex::default(),
                },
            );
        }
        // Each worker's file events feed the version tables of its workspaces.
        for (env, runner) in &remote_runners {
            let tables: std::collections::HashMap<String, Arc<crate::versions::Versions>> =
                workspaces
                    .values()
                    .filter(|w| w.facts.environment == *env)
                    .map(|w| (w.facts.id.clone(), Arc::clone(&w.versions)))
                    .collect();
            runner.subscribe(Arc::new(move |e: codespace_runner_api::Event| {
                crate::versions::runner_event(&tables, &e)
            }));
        }
        // Decision rows leave the request path through the store's batching writer (read-only
        // rows group-committed, mutations written ahead); see `crate::audit`.
        if let Some(store) = &store {
            crate::audit::start_writer(store);
        }
        let sink = Arc::new(crate::audit::StoreSink::new(
            store.clone(),
            config.redaction.clone(),
        ));
        let decider = Arc::new(Decider::new(
            Arc::clone(&policy),
            config.profiles.clone(),
            sink,
        ));
        let net = Arc::new(crate::gateway::net::Egress::new(
            Arc::clone(&decider),
            config.redaction.clone(),
            &config.limits,
        ));
        Ok(Gateway {
            svc: Services {
                config,
                store,
                sandbox,
                transports: vec!["stdio".to_string()],
                leases,
                patch_hooks: Arc::new(crate::gateway::patches::PatchHooks::default()),
                processes,
                temps,
                store_stats: crate::retention::StatsCell::default(),
                net,
                host,
                workers,
            },
            policy,
            workspaces,
            decider,
        })
    }

    /// The workspace identity (store registration) `workspace` is served under, if registered.
    pub fn registration(&self, workspace: &str) -> Option<&str> {
        self.workspaces
            .get(workspace)
            .map(|w| w.registration.as_str())
            .filter(|r| !r.is_empty())
    }

    /// Sets the transports this server serves (`workspace_info.transports`).
    pub fn with_transports(mut self, transports: Vec<String>) -> Gateway {
        self.svc.transports = transports;
        self
    }

    /// Installs apply_patch test hooks (failure injection, apply-window edits). Not reachable
    /// from the wire; tests only.
    #[doc(hidden)]
    pub fn with_patch_hooks(mut self, hooks: crate::gateway::patches::PatchHooks) -> Gateway {
        self.svc.patch_hooks = Arc::new(hooks);
        self
    }

    /// The live policy store.
    pub fn policy(&self) -> &Arc<PolicyStore> {
        &self.policy
    }

    /// Records this start in the store's events: version, policy set, the host `probe` the
    /// transport ran (with the per-process task limit added), the workspaces served; and the set
    /// in force in the policy set record (with its signer). A store failure is logged.
    pub fn record_startup(&self, mut probe: serde_json::Value) {
        let Some(store) = &self.store else { return };
        let pids = self.host.pids_isolation();
        if let serde_json::Value::Object(m) = &mut probe {
            m.insert(
                "pids".into(),
                serde_json::json!({
                    "limit": pids.limit,
                    "mechanism": pids.mechanism.as_str(),
                    "escapees_tracked": pids.tracked,
                }),
            );
        }
        let detail = serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "policy_set_sha256": self.policy.snapshot().sha256,
            "probe": probe,
            "workspaces": self.workspaces.keys().collect::<Vec<_>>(),
        });
        crate::policy::reload::record_set(store, &self.policy.snapshot());
        if let Err(e) = store.insert_event("startup", &detail) {
            tracing::error!(error = %e, "cannot record the start-up event");
        }
    }

    pub(crate) fn workspace(&self, id: &str) -> Result<&WorkspaceRuntime, ToolError> {
        self.workspaces.get(id).ok_or_else(|| {
            ToolError::new(
                ErrorCode::WorkspaceNotFound,
                format!("unknown workspace_id `{id}`"),
            )
        })
    }

    /// The decider's counters, for tests: `(entries in the decision cache, sub-requests asked
    /// so far)`.
    #[doc(hidden)]
    pub fn decider_counters(&self) -> (usize, u64) {
        (self.decider.decision_cache_len(), self.decider.asked())
    }

    /// Builds and decides the requests of a call on a workspace; `Err` is the refusal.
    pub(crate) async fn authorize(
        &self,
        snap: &PolicySnapshot,
        ws: &WorkspaceRuntime,
        call: &ToolCall,
        session: &Session,
        process: Option<&ProcessFacts>,
    ) -> Result<Decided, ToolError> {
        let crate::request::Built {
            action,
            mut reqs,
            targets,
            patch,
        } = crate::request::build(call, session, process)?;
        // A `read` on a worker's workspace is decided with the builder's one link and decided
        // again with the count of the file the worker actually opened, before anything is
        // returned (tools/fs.rs): a stat round trip to the worker first would only repeat it.
        if !(ws.is_remote() && matches!(call, ToolCall::Read(_))) {
            ws.fill_links(&mut reqs).await?;
        }
        // Secrets in a command line never reach the log or the caller's error text; Cedar
        // still decides on the real context.
        for r in &mut reqs {
            if let std::borrow::Cow::Owned(red) = self.config.redaction.text(&r.subject) {
                r.subject = red;
            }
        }
        let decision = self
            .decider
            .decide(snap, &ws.facts, call.tool(), &reqs, session);
        if decision.allowed() {
            environment::gate(self, ws, call, &decision.decision_id).await?;
            Ok(Decided {
                decision,
                action,
                targets,
                patch,
            })
        } else {
            Err(decision.to_error(snap))
        }
    }

    /// Resolves the workspace of `call` and decides the call on it (audited): the handler's
    /// [`Authorized`] value, or the refusal.
    pub(crate) async fn authorize_on<'a>(
        &'a self,
        snap: &'a Arc<PolicySnapshot>,
        workspace_id: &str,
        call: &ToolCall,
        session: &'a Session,
    ) -> Result<Authorized<'a>, ToolError> {
        let ws = self.workspace(workspace_id)?;
        let decided = self.authorize(snap, ws, call, session, None).await?;
        Ok(Authorized::new(self, snap, ws, session, decided))
    }

    /// Finds the hold `approval_resolve` names (one this server serves) and decides the
    /// resolution: the handler's [`Authorized`] value with the hold's row, or the refusal.
    pub(crate) fn authorize_resolve<'a>(
        &'a self,
        snap: &'a Arc<PolicySnapshot>,
        session: &'a Session,
        call: &ToolCall,
        p: &crate::wire::ApprovalResolveParams,
    ) -> Result<(Authorized<'a>, codespace_store::ApprovalRow), ToolError> {
        let (row, ws) = self.holds().served_hold(&p.approval_id)?;
        let decision = self
            .holds()
            .decide_resolve(snap, session, call, p, &row, ws)?;
        let decided = Decided::bare(decision, crate::policy::Action::Tool(call.name()));
        Ok((Authorized::new(self, snap, ws, session, decided), row))
    }

    /// `workspace_info` without a workspace under `snap` (nothing is decided: it names none).
    pub(crate) fn server_info(&self, snap: &PolicySnapshot) -> crate::wire::WorkspaceInfoResult {
        info::server_info(&self.svc, snap, self.policy.last_rejected())
    }

    /// Decides a call a human may have to confirm (`apply_patch`, `exec_command`): its own
    /// requests, then, when `confirm`, one `confirm` request per distinct sub-request; a held
    /// call is refused with its hold's `APPROVAL_REQUIRED`. A granted hold being resumed is not
    /// asked again (`confirm` false).
    pub(crate) async fn authorize_held<'a>(
        &'a self,
        snap: &'a Arc<PolicySnapshot>,
        workspace_id: &str,
        call: &ToolCall,
        session: &'a Session,
        confirm: bool,
    ) -> Result<Authorized<'a>, ToolError> {
        let ws = self.workspace(workspace_id)?;
        let decided = self.authorize(snap, ws, call, session, None).await?;
        if confirm && self.holds().confirm_holds(snap, ws, call, session).await? {
            return Err(self.holds().hold(ws, call, session).await);
        }
        Ok(Authorized::new(self, snap, ws, session, decided))
    }
}

impl Services {
    /// Records an HTTP listener of this server (the transport calls it once bound): egress-proxy
    /// connections to it are `resource.server_owned`, which a base guardrail forbids.
    pub fn add_http_listener(&self, addr: std::net::SocketAddr) {
        self.net.add_listener(addr);
    }

    /// Starts the background retention pruner on `store` (open a second connection to the same
    /// file for it) with the configured retention; its statistics feed `workspace_info.store`.
    /// Dropping the returned handle stops it.
    pub fn start_retention(
        &self,
        store: Arc<Store>,
        interval: std::time::Duration,
    ) -> std::io::Result<crate::retention::Pruner> {
        crate::retention::Pruner::spawn(
            store,
            self.config.retention,
            interval,
            self.store_stats.clone(),
        )
    }

    /// What the start-up probe found about the command sandbox.
    pub fn sandbox(&self) -> SandboxFacts {
        self.sandbox
    }

    /// The store, when there is one.
    pub fn store(&self) -> Option<&Arc<Store>> {
        self.store.as_ref()
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Commits every audit row queued so far (the barrier of in-process readers and tests).
    pub fn flush_audit(&self) {
        if let Some(store) = &self.store {
            crate::audit::flush(store);
        }
    }

    /// Drains the audit queue and stops its writer; later rows are written synchronously.
    pub fn stop_audit(&self) {
        if let Some(store) = &self.store {
            crate::audit::stop(store);
        }
    }
}
