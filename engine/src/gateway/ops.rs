//! Operations: every mutating call gets an `op-<uuid>` row in the store; `operation_key` makes a
//! call idempotent (same key + same fingerprint replays, a different fingerprint conflicts)
//! within its scope — the calling client, the workspace identity (its registration: the id bound
//! to this root) and the tool — until the key expires (`retention.operation_keys`); outside that
//! scope the key is unknown and the call runs as new. `operation_status` (`tools/ops.rs`) reads
//! the rows back; the gateway resolves which row (`operation_target`).

use crate::error::{ErrorCode, ToolError};
use crate::gateway::{Gateway, Services, WorkspaceRuntime};
use crate::request::Session;
use crate::wire::OperationStatusParams;
use codespace_store::{KeyClaim, KeyScope, OperationRow, Store};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// How a mutating call starts.
#[derive(Debug)]
pub enum Begin {
    /// A new operation with this id.
    New(String),
    /// The key was used before with the same request: replay this row.
    Replay(Box<OperationRow>),
}

/// sha256 of the canonical JSON of `v` (object keys sorted).
pub fn fingerprint(v: &Value) -> String {
    // serde_json's Map is ordered by key (no preserve_order feature), so this is canonical.
    let text = serde_json::to_string(v).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// The stored error of a finished operation, replayed with its operation id (None when the
/// operation did not fail or never finished).
pub fn replayed_error(row: &OperationRow) -> Option<ToolError> {
    let (Some(Value::Object(res)), Some(_)) = (&row.result, row.finished_ms) else {
        return None;
    };
    let err = res.get("error")?;
    let code = err
        .get("code")
        .and_then(Value::as_str)
        .unwrap_or("INTERNAL");
    let message = err.get("message").and_then(Value::as_str).unwrap_or("");
    Some(
        ToolError::new(
            ErrorCode::from_code(code),
            format!(
                "replayed operation {} ({}): {message}",
                row.operation_id, row.status
            ),
        )
        .with_operation(row.operation_id.clone()),
    )
}

fn store_err(e: codespace_store::StoreError) -> ToolError {
    ToolError::new(ErrorCode::Internal, format!("store: {e}"))
}

impl Services {
    /// The store, required by mutating tools.
    pub(crate) fn require_store(&self) -> Result<&Arc<Store>, ToolError> {
        self.store
            .as_ref()
            .ok_or_else(|| ToolError::new(ErrorCode::Internal, "no store is configured"))
    }

    /// Finishes an operation with a status and its result (or error body).
    pub(crate) fn finish_operation(
        &self,
        id: &str,
        status: crate::facts::OperationStatus,
        result: &Value,
        reason: Option<&str>,
    ) {
        let Some(store) = &self.store else { return };
        // The status and its `finished` step: one commit.
        if let Err(e) = store.finish_operation_with_event(id, status.as_str(), Some(result), reason)
        {
            tracing::error!(operation_id = id, error = %e, "cannot finish operation");
        }
        let redactor = self.config.redaction.current();
        let reason = reason.map(|r| redactor.text(r));
        crate::telemetry::operation_step(id, "finished", Some(status.as_str()), reason.as_deref());
    }

    /// [`Services::finish_operation`] (no reason) on the blocking pool, for a call with other
    /// work to wait for meanwhile (a command's exit): await the handle before the reply leaves,
    /// so a replay of the call finds the operation finished.
    pub(crate) fn finish_operation_beside(
        &self,
        id: &str,
        status: crate::facts::OperationStatus,
        result: Value,
    ) -> Option<tokio::task::JoinHandle<()>> {
        crate::telemetry::operation_step(id, "finished", Some(status.as_str()), None);
        let store = Arc::clone(self.store.as_ref()?);
        let id = id.to_string();
        Some(tokio::task::spawn_blocking(move || {
            if let Err(e) =
                store.finish_operation_with_event(&id, status.as_str(), Some(&result), None)
            {
                tracing::error!(operation_id = %id, error = %e, "cannot finish operation");
            }
        }))
    }
}

/// An operation about to be minted: its id is known before its row is stored.
pub(crate) struct Minting {
    store: Arc<Store>,
    row: OperationRow,
    scope: Option<KeyScope>,
    instance: String,
}

/// The operation row of a call with no key (it cannot be a replay), stored on the blocking pool
/// while the call prepares: nothing with an effect happens before [`Minted::ready`] said it is
/// stored.
pub(crate) enum Minted {
    Pending(tokio::task::JoinHandle<Result<Begin, ToolError>>),
    Stored,
    Failed(ToolError),
}

impl Minted {
    /// Starts storing `minting` on the blocking pool.
    pub(crate) fn start(minting: Minting) -> Minted {
        Minted::Pending(tokio::task::spawn_blocking(move || minting.commit()))
    }

    /// Waits until the row is stored; `Err` when it could not be (then there is no operation).
    pub(crate) async fn ready(&mut self) -> Result<(), ToolError> {
        if let Minted::Pending(handle) = self {
            *self = match handle.await {
                Ok(Ok(Begin::New(_))) => Minted::Stored,
                Ok(Ok(Begin::Replay(_))) => Minted::Failed(ToolError::new(
                    ErrorCode::Internal,
                    "an operation without a key was taken for a replay",
                )),
                Ok(Err(e)) => Minted::Failed(e),
                Err(e) => Minted::Failed(ToolError::new(
                    ErrorCode::Internal,
                    format!("operation task: {e}"),
                )),
            };
        }
        match self {
            Minted::Failed(e) => Err(e.clone()),
            _ => Ok(()),
        }
    }
}

impl Minting {
    /// The operation's id.
    pub(crate) fn id(&self) -> &str {
        &self.row.operation_id
    }

    /// Stores the operation (blocking), or finds the replay of its key.
    pub(crate) fn commit(self) -> Result<Begin, ToolError> {
        let Minting {
            store,
            row,
            scope,
            instance,
        } = self;
        let (id, tool, fingerprint) = (&row.operation_id, &row.tool, &row.fingerprint);
        // Owned by this server instance: another server starting on the same store leaves the
        // operation, its journal and its processes alone while this one runs.
        // The operation and its `minted` step: one commit.
        match store
            .create_owned_operation_with_event(&row, scope.as_ref(), Some(&instance), "minted")
            .map_err(store_err)?
        {
            KeyClaim::Created => {
                crate::telemetry::operation_step(id, "minted", None, None);
                Ok(Begin::New(id.clone()))
            }
            KeyClaim::Existing(prev) => {
                if &prev.fingerprint == fingerprint {
                    Ok(Begin::Replay(prev))
                } else {
                    Err(ToolError::new(
                        ErrorCode::OperationKeyConflict,
                        format!(
                            "operation_key was already used for a different {tool} request (operation {})",
                            prev.operation_id
                        ),
                    )
                    .with_operation(prev.operation_id.clone()))
                }
            }
        }
    }
}

/// The operation a mutating call would mint (nothing stored yet).
pub(crate) fn prepare_operation(
    gw: &Gateway,
    tool: &str,
    workspace: &str,
    key: Option<&str>,
    fingerprint: &str,
    session: &Session,
) -> Result<Minting, ToolError> {
    let store = Arc::clone(gw.require_store()?);
    let id = format!("op-{}", uuid::Uuid::new_v4());
    let scope = key_scope(gw, workspace, session);
    let row = OperationRow {
        operation_id: id.clone(),
        operation_key: key.map(str::to_string),
        fingerprint: fingerprint.to_string(),
        tool: tool.to_string(),
        workspace: workspace.to_string(),
        client: Some(session.client.clone()),
        status: crate::facts::OperationStatus::Running.as_str().into(),
        created_ms: codespace_store::now_ms(),
        finished_ms: None,
        result: None,
    };
    Ok(Minting {
        store,
        row,
        scope,
        instance: gw.temps.instance().to_string(),
    })
}

/// The scope a key used now by `session` in `workspace` is claimed in (None when the
/// workspace has no registration, i.e. without a store).
fn key_scope(gw: &Gateway, workspace: &str, session: &Session) -> Option<KeyScope> {
    let registration = gw.registration(workspace)?;
    let ttl = i64::try_from(gw.config.retention.operation_keys.as_millis()).unwrap_or(i64::MAX);
    Some(KeyScope {
        client: session.client.clone(),
        registration: registration.to_string(),
        expires_ms: codespace_store::now_ms().saturating_add(ttl),
    })
}

/// The unexpired operations `session` keyed with `key` in the workspaces this server serves
/// under their current registration, oldest first; `tool` narrows to one tool.
pub(crate) fn keyed_operations(
    gw: &Gateway,
    session: &Session,
    key: &str,
    tool: Option<&str>,
) -> Result<Vec<OperationRow>, ToolError> {
    let store = gw.require_store()?;
    let rows = store
        .keyed_operations(&session.client, key, codespace_store::now_ms())
        .map_err(store_err)?;
    Ok(rows
        .into_iter()
        .filter(|(reg, row)| {
            gw.registration(&row.workspace) == Some(reg.as_str())
                && tool.is_none_or(|t| row.tool == t)
        })
        .map(|(_, row)| row)
        .collect())
}

/// The operation `operation_status` asks about: by exactly one of id and key, only among
/// the caller's own operations (another client's reads exactly like a missing one, and is
/// never decided on), with the workspace it ran in. Nothing is decided here: the gateway
/// decides the call on that workspace next.
pub(crate) fn operation_target<'a>(
    gw: &'a Gateway,
    session: &Session,
    p: &OperationStatusParams,
) -> Result<(OperationRow, &'a WorkspaceRuntime), ToolError> {
    let store = gw.require_store()?;
    let not_found = |m: &str| ToolError::new(ErrorCode::OperationNotFound, m.to_string());
    let id = p.operation_id.as_deref().filter(|s| !s.is_empty());
    let key = p.operation_key.as_deref().filter(|s| !s.is_empty());
    let row = match (id, key) {
        (Some(id), None) => store
            .operation_by_id(id)
            .map_err(store_err)?
            .filter(|row| row.client.as_deref().is_none_or(|c| c == session.client))
            .ok_or_else(|| not_found("no operation with that operation_id"))?,
        (None, Some(key)) => keyed_operations(gw, session, key, None)?
            .into_iter()
            .max_by_key(|r| r.created_ms)
            .ok_or_else(|| not_found("no operation with that operation_key"))?,
        _ => {
            return Err(not_found(
                "give exactly one of operation_id and operation_key",
            ));
        }
    };
    let ws = gw
        .workspace(&row.workspace)
        .map_err(|_| not_found("the operation's workspace is no longer registered"))?;
    Ok((row, ws))
}
