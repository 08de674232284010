//! `operation_status`: what became of one of the caller's operations, a handler of an
//! [`Authorized`] call (the gateway resolved the operation and decided the call on its workspace).

use crate::error::{ErrorCode, ToolError};
use crate::gateway::Authorized;
use crate::wire::rfc3339_ms;
use codespace_store::OperationRow;
use serde_json::{Value, json};

fn store_err(e: codespace_store::StoreError) -> ToolError {
    ToolError::new(ErrorCode::Internal, format!("store: {e}"))
}

impl Authorized<'_> {
    /// `operation_status` of the operation the gateway resolved (and decided the call on).
    pub(crate) fn operation_status(&self, row: &OperationRow) -> Result<Value, ToolError> {
        let store = self.require_store()?;
        let events: Vec<Value> = store
            .operation_events(&row.operation_id)
            .map_err(store_err)?
            .into_iter()
            .map(|e| {
                let mut v = json!({"at": rfc3339_ms(e.at_ms), "name": e.name});
                if let Value::Object(m) = &mut v {
                    if let Some(s) = e.status {
                        m.insert("status".into(), json!(s));
                    }
                    if let Some(r) = e.reason {
                        m.insert("reason".into(), json!(r));
                    }
                }
                v
            })
            .collect();
        let status = if row.finished_ms.is_none() {
            crate::facts::OperationStatus::Running.as_str().to_string()
        } else {
            row.status.clone()
        };
        let mut out = json!({
            "operation_id": row.operation_id,
            "status": status,
            "replayed": false,
            "kind": crate::tool_table::operation_kind(&row.tool),
            "tool": row.tool,
            "workspace_id": row.workspace,
            "created_at": row.created_ms / 1000,
            "events": events,
        });
        if let Value::Object(m) = &mut out {
            if let Some(f) = row.finished_ms {
                m.insert("finished_at".into(), json!(f / 1000));
            }
            if let Some(k) = &row.operation_key {
                m.insert("operation_key".into(), json!(k));
            }
            if let Some(Value::Object(res)) = &row.result {
                for field in ["files", "changes", "process_id"] {
                    if let Some(v) = res.get(field) {
                        let empty = v.as_array().is_some_and(Vec::is_empty);
                        if !empty {
                            m.insert(field.into(), v.clone());
                        }
                    }
                }
                if let Some(err) = res.get("error") {
                    m.insert("error".into(), err.clone());
                }
            }
        }
        Ok(out)
    }
}
