//! Hot reload of the policy set: `notify` on the policies directory and the schema file, plus an
//! explicit trigger (SIGHUP in `serve`). Changes are debounced: nothing is read until the files
//! have been quiet for a while, and two reads a moment apart must hash the same. Then: parse →
//! validate → lint → (optionally) the shipped policy tests → atomic swap. A rejected set keeps
//! the last good one in force. Every attempt is an `events` row (`policy_reload`).

use crate::config::Profile;
use crate::{PolicyBundle, PolicyErrors, PolicySnapshot, PolicySource, PolicyStore, bundle_hash};
use codespace_store::Store;
use notify::{EventKind, RecursiveMode, Watcher};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How reloads behave.
#[derive(Debug, Clone)]
pub struct ReloadOptions {
    /// The files must be quiet this long before they are read.
    pub quiet: Duration,
    /// Pause between the two reads that must agree.
    pub settle: Duration,
    /// When set, every `.yaml` test file in this directory must pass before a set is swapped in.
    pub tests_dir: Option<PathBuf>,
    /// The profile tree those tests run with (the config's); None: the built-ins.
    pub profiles: Option<BTreeMap<String, Profile>>,
    /// What runs those tests (the policy tooling's `reload_gate`); without one, a set that must
    /// pass tests is refused.
    pub test_gate: Option<TestGate>,
    /// Called once per refused reload (the server's `codespace_policy_reload_failures_total`).
    pub on_rejected: Option<fn()>,
}

/// Runs the `.yaml` policy tests of a directory against a candidate set with a profile tree;
/// one line per failure (none: the set may be swapped in).
pub type TestGate = fn(&crate::PolicySnapshot, &Path, &BTreeMap<String, Profile>) -> Vec<String>;

impl Default for ReloadOptions {
    fn default() -> ReloadOptions {
        ReloadOptions {
            quiet: Duration::from_millis(200),
            settle: Duration::from_millis(50),
            tests_dir: None,
            profiles: None,
            test_gate: None,
            on_rejected: None,
        }
    }
}

/// What started a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A file under the policies directory or the schema changed.
    Watch,
    /// SIGHUP (or [`Reloader::trigger`]).
    Signal,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Trigger::Watch => "watch",
            Trigger::Signal => "signal",
        }
    }
}

/// The result of one reload attempt.
#[derive(Debug, Clone)]
pub struct ReloadOutcome {
    /// The new set is in force.
    pub accepted: bool,
    /// Hash of the set in force before.
    pub old_sha256: String,
    /// Hash of the set that was read (None when it could not be read).
    pub new_sha256: Option<String>,
    /// Why it was refused (empty when accepted).
    pub diagnostics: Vec<String>,
}

/// Why the reloader could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file watcher could not be set up.
    #[error("policy watcher: {0}")]
    Watch(String),
    /// The reload thread could not be started.
    #[error("policy reload thread: {0}")]
    Thread(String),
}

/// Records `snap` in the store's policy set record (its hash and signer), the record audit rows
/// name by `policy_set_sha256`. A store failure is logged.
pub fn record_set(store: &Store, snap: &PolicySnapshot) {
    let signer = snap
        .signer
        .as_ref()
        .map(|s| (s.principal.as_str(), s.key.as_str()));
    if let Err(e) = store.record_policy_set(&snap.sha256, codespace_store::now_ms(), signer) {
        tracing::error!(error = %e, "cannot record the policy set in force");
    }
}

/// One reload attempt with a bundle already read: compile, test, swap or reject, log the event.
pub fn reload_with(
    policy: &PolicyStore,
    store: Option<&Store>,
    bundle: Result<PolicyBundle, PolicyErrors>,
    opts: &ReloadOptions,
    trigger: Trigger,
) -> ReloadOutcome {
    let old = policy.snapshot().sha256.clone();
    let new_sha = bundle.as_ref().ok().map(bundle_hash);
    let result = bundle
        .and_then(|b| policy.compile_live(b))
        .and_then(|snap| {
            let problems = opts
                .tests_dir
                .as_deref()
                .map(|d| {
                    let builtins = crate::config::builtin_profiles();
                    match opts.test_gate {
                        Some(gate) => gate(&snap, d, opts.profiles.as_ref().unwrap_or(&builtins)),
                        None => vec![
                            "tests: this build runs no policy tests, and a set that must pass them is refused"
                                .to_string(),
                        ],
                    }
                })
                .unwrap_or_default();
            if problems.is_empty() {
                Ok(snap)
            } else {
                Err(PolicyErrors(problems))
            }
        });
    let outcome = match result {
        Ok(snap) => {
            policy.install(snap);
            ReloadOutcome {
                accepted: true,
                old_sha256: old,
                new_sha256: new_sha,
                diagnostics: Vec::new(),
            }
        }
        Err(e) => {
            policy.record_rejection(e.0.clone());
            ReloadOutcome {
                accepted: false,
                old_sha256: old,
                new_sha256: new_sha,
                diagnostics: e.0,
            }
        }
    };
    if outcome.accepted {
        tracing::info!(old = %outcome.old_sha256, new = ?outcome.new_sha256, "policy reload accepted");
    } else {
        if let Some(f) = opts.on_rejected {
            f();
        }
        tracing::warn!(
            old = %outcome.old_sha256,
            diagnostics = %outcome.diagnostics.join(" | "),
            "policy reload rejected; the last good set stays in force"
        );
    }
    // The shadow set is the live files plus `shadow/`: re-read it whatever happened.
    let shadow = policy.reload_shadow();
    if let Some(store) = store {
        if outcome.accepted {
            record_set(store, &policy.snapshot());
        }
        let detail = json!({
            "shadow": shadow_detail(policy, shadow.as_ref()),
            "accepted": outcome.accepted,
            "trigger": trigger.as_str(),
            "old_sha256": outcome.old_sha256,
            "new_sha256": outcome.new_sha256,
            "in_force_sha256": policy.snapshot().sha256,
            "diagnostics": outcome.diagnostics,
            "tests_run": opts.tests_dir.is_some(),
            "signature_required": policy.signing().is_some(),
            "in_force_signer": policy.snapshot().signer.as_ref().map(|s| json!({
                "principal": s.principal,
                "key": s.key,
            })),
        });
        if let Err(e) = store.insert_event("policy_reload", &detail) {
            tracing::error!(error = %e, "cannot log the policy reload event");
        }
    }
    outcome
}

fn shadow_detail(
    policy: &PolicyStore,
    change: Option<&Result<String, PolicyErrors>>,
) -> serde_json::Value {
    json!({
        "changed": change.is_some(),
        "in_force_sha256": policy.shadow().map(|s| s.sha256.clone()),
        "diagnostics": match change {
            Some(Err(e)) => e.0.clone(),
            _ => Vec::new(),
        },
    })
}

/// Re-reads the shadow set alone (the live files did not change) and logs a `shadow_reload`
/// event when it changed or was refused.
pub fn reload_shadow_only(policy: &PolicyStore, store: Option<&Store>) {
    let Some(change) = policy.reload_shadow() else {
        return;
    };
    if let Some(store) = store
        && let Err(e) = store.insert_event("shadow_reload", &shadow_detail(policy, Some(&change)))
    {
        tracing::error!(error = %e, "cannot log the shadow reload event");
    }
}

/// Reads the store's source now and reloads it (no debounce).
pub fn reload_now(
    policy: &PolicyStore,
    store: Option<&Store>,
    opts: &ReloadOptions,
    trigger: Trigger,
) -> ReloadOutcome {
    let bundle = policy.read_source();
    reload_with(policy, store, bundle, opts, trigger)
}

enum Msg {
    Fs,
    Signal,
    Stop,
}

/// A running reloader: a watcher (for on-disk sources) and one thread that debounces and
/// reloads. Dropping it stops both.
pub struct Reloader {
    tx: mpsc::Sender<Msg>,
    thread: Option<JoinHandle<()>>,
    watcher: Option<notify::RecommendedWatcher>,
    attempts: Arc<AtomicU64>,
    last: Arc<Mutex<Option<ReloadOutcome>>>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("watching", &self.watcher.is_some())
            .field("attempts", &self.attempts.load(Ordering::SeqCst))
            .finish()
    }
}

fn hash_or_error(b: &Result<PolicyBundle, PolicyErrors>) -> Result<String, String> {
    match b {
        Ok(b) => Ok(bundle_hash(b)),
        Err(e) => Err(e.to_string()),
    }
}

impl Reloader {
    /// Starts watching `policy`'s source (when it is on disk) and the reload thread.
    pub fn start(
        policy: Arc<PolicyStore>,
        store: Option<Arc<Store>>,
        opts: ReloadOptions,
    ) -> Result<Reloader, ReloadError> {
        let (tx, rx) = mpsc::channel::<Msg>();
        let watcher = match policy.source() {
            PolicySource::Embedded => None,
            PolicySource::Dir { policies, schema } => Some(watch(policies, schema, tx.clone())?),
        };
        let attempts = Arc::new(AtomicU64::new(0));
        let last = Arc::new(Mutex::new(None));
        let (attempts2, last2) = (Arc::clone(&attempts), Arc::clone(&last));
        let thread = std::thread::Builder::new()
            .name("policy-reload".into())
            .stack_size(super::EVAL_STACK_BYTES)
            .spawn(move || {
                reload_loop(&policy, store.as_deref(), &opts, &rx, &attempts2, &last2);
            })
            .map_err(|e| ReloadError::Thread(e.to_string()))?;
        Ok(Reloader {
            tx,
            thread: Some(thread),
            watcher,
            attempts,
            last,
        })
    }

    /// Asks for a reload (what SIGHUP does). It is debounced like a file change.
    pub fn trigger(&self) {
        let _ = self.tx.send(Msg::Signal);
    }

    /// Reload attempts made so far (accepted or rejected; unchanged sets are not attempts).
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::SeqCst)
    }

    /// The outcome of the last attempt.
    pub fn last_outcome(&self) -> Option<ReloadOutcome> {
        self.last.lock().ok().and_then(|g| g.clone())
    }
}

impl Drop for Reloader {
    fn drop(&mut self) {
        self.watcher = None;
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch(
    policies: &Path,
    schema: &Path,
    tx: mpsc::Sender<Msg>,
) -> Result<notify::RecommendedWatcher, ReloadError> {
    let policies_abs = std::fs::canonicalize(policies).unwrap_or_else(|_| policies.to_path_buf());
    let schema_abs = std::fs::canonicalize(schema).unwrap_or_else(|_| schema.to_path_buf());
    let schema_name = schema_abs.file_name().map(|n| n.to_os_string());
    let schema_dir = schema_abs.parent().map(Path::to_path_buf);
    let (p2, sn) = (policies_abs.clone(), schema_name.clone());
    let mut w = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        let Ok(ev) = res else {
            // A watcher error (e.g. queue overflow): reload to be safe.
            let _ = tx.send(Msg::Fs);
            return;
        };
        if matches!(ev.kind, EventKind::Access(_)) {
            return;
        }
        let relevant = ev.paths.iter().any(|p| {
            p.starts_with(&p2) || (sn.is_some() && p.file_name().map(|n| n.to_os_string()) == sn)
        });
        if relevant || ev.paths.is_empty() {
            let _ = tx.send(Msg::Fs);
        }
    })
    .map_err(|e| ReloadError::Watch(e.to_string()))?;
    w.watch(&policies_abs, RecursiveMode::Recursive)
        .map_err(|e| ReloadError::Watch(format!("policies directory: {e}")))?;
    if let Some(dir) = schema_dir.filter(|d| !d.starts_with(&policies_abs)) {
        w.watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|e| ReloadError::Watch(format!("schema directory: {e}")))?;
    }
    Ok(w)
}

fn reload_loop(
    policy: &PolicyStore,
    store: Option<&Store>,
    opts: &ReloadOptions,
    rx: &mpsc::Receiver<Msg>,
    attempts: &AtomicU64,
    last: &Mutex<Option<ReloadOutcome>>,
) {
    loop {
        let mut trigger = match rx.recv() {
            Ok(Msg::Fs) => Trigger::Watch,
            Ok(Msg::Signal) => Trigger::Signal,
            Ok(Msg::Stop) | Err(_) => return,
        };
        // Debounce: quiet for `quiet`, then two reads `settle` apart that hash the same with no
        // event in between. A writer still writing keeps us waiting.
        let bundle = 'settle: loop {
            loop {
                match rx.recv_timeout(opts.quiet) {
                    Ok(Msg::Fs) => {}
                    Ok(Msg::Signal) => trigger = Trigger::Signal,
                    Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                    Err(RecvTimeoutError::Timeout) => break,
                }
            }
            let first = hash_or_error(&policy.read_source());
            match rx.recv_timeout(opts.settle) {
                Ok(Msg::Fs) => continue 'settle,
                Ok(Msg::Signal) => {
                    trigger = Trigger::Signal;
                    continue 'settle;
                }
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {}
            }
            let second = policy.read_source();
            if hash_or_error(&second) == first {
                break 'settle second;
            }
        };
        // A file event that leaves the set as it is (a touch, a test file edit) is no reload,
        // unless it undoes a rejected edit: then the reload clears the rejection.
        if trigger == Trigger::Watch
            && policy.last_rejected().is_none()
            && let Ok(b) = &bundle
            && bundle_hash(b) == policy.snapshot().sha256
        {
            reload_shadow_only(policy, store);
            continue;
        }
        let outcome = reload_with(policy, store, bundle, opts, trigger);
        if let Ok(mut g) = last.lock() {
            *g = Some(outcome);
        }
        attempts.fetch_add(1, Ordering::SeqCst);
    }
}
