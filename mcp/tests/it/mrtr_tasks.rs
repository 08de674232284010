//! MCP 2026-07-28 holds and tasks through the real binary over stdio, driven by rmcp's client in
//! the `server/discover` lifecycle: a held `apply_patch` answered through `input_required` runs
//! once (one operation row, the file changed once); a replayed, altered, moved (another call's)
//! or stale-file `requestState` fails with APPROVAL_CONFLICT / APPROVAL_NOT_FOUND /
//! VERSION_CONFLICT; a task-mode `exec_command` is `working`, then `completed` with exactly what
//! `read_process` returns, and `tasks/cancel` terminates another; a tty exec is refused as a
//! task. (Another client's `requestState` is refused by the binding: `mcp/src/mrtr.rs` unit
//! tests; every stdio caller is the same client.)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common::BIN;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
    FormElicitationCapability, GetTaskParams, InputRequest, InputResponses, ProtocolVersion,
    TaskPayload, TaskStatus,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A 2026 client: form elicitation (granting, counting questions) and, when `tasks`, the tasks
/// extension.
#[derive(Clone, Default)]
struct Client2026 {
    tasks: bool,
    asked: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Client2026 {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        let mut caps = if self.tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        caps.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::new()));
        info.capabilities = caps;
        info.protocol_version = ProtocolVersion::V_2026_07_28;
        info
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.asked.lock().unwrap().push(message);
        }
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"decision": "grant"})))
    }
}

/// Workspace `w` in `dir/ws` (unsandboxed so commands run anywhere), `approvals` as given; the
/// config path.
fn config(dir: &Path, approvals: &str) -> PathBuf {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let cfg = json!({
        "store": dir.join("store.db"),
        "workspaces": {"w": {"root": ws, "profile": "workspace-write", "approvals": approvals,
                             "sandbox": "off", "secret_masking": "off"}},
    });
    let path = dir.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    path
}

struct Served {
    client: RunningService<RoleClient, Client2026>,
    _child: tokio::process::Child,
}

/// `codespace serve` on `cfg`, with a 2026 client connected through `server/discover`.
async fn serve(dir: &Path, cfg: &Path, handler: Client2026) -> Served {
    let mut child = tokio::process::Command::new(BIN)
        .arg("serve")
        .arg("--config")
        .arg(cfg)
        .current_dir(dir)
        .env("CODESPACE_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = handler
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    Served {
        client,
        _child: child,
    }
}

fn params(tool: &'static str, args: &Value) -> CallToolRequestParams {
    let Value::Object(m) = args.clone() else {
        unreachable!()
    };
    CallToolRequestParams::new(tool).with_arguments(m)
}

fn grant() -> InputResponses {
    let mut r = InputResponses::new();
    r.insert(
        "approval".into(),
        json!({"action": "accept", "content": {"decision": "grant"}}),
    );
    r
}

/// The complete result of a call (panics on input_required or a task).
fn complete(r: CallToolResponse) -> CallToolResult {
    match r {
        CallToolResponse::Complete(r) => r,
        other => panic!("expected a complete result, got {other:?}"),
    }
}

/// The ErrorBody's code of a failed complete result.
fn code(r: CallToolResponse) -> String {
    let r = complete(r);
    assert_eq!(r.is_error, Some(true), "{r:?}");
    r.structured_content.unwrap()["code"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The `requestState` and the question of a held call.
async fn held(s: &Served, tool: &'static str, args: &Value) -> (String, String) {
    match s.client.call_tool_once(params(tool, args)).await.unwrap() {
        CallToolResponse::InputRequired(r) => {
            let requests = r.input_requests.unwrap();
            let Some(InputRequest::Elicitation(q)) = requests.get("approval") else {
                panic!("no approval question in {requests:?}");
            };
            let ElicitRequestParams::FormElicitationParams { message, .. } = &q.params else {
                panic!("not a form: {q:?}");
            };
            (r.request_state.unwrap(), message.clone())
        }
        other => panic!("expected input_required, got {other:?}"),
    }
}

fn add_patch(path: &str) -> Value {
    json!({"workspace_id": "w",
           "patch": format!("*** Begin Patch\n*** Add File: {path}\n+once\n*** End Patch\n")})
}

fn patch_operations(store: &Path) -> i64 {
    let conn =
        rusqlite::Connection::open_with_flags(store, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row(
        "SELECT count(*) FROM operations WHERE tool = 'apply_patch'",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

#[tokio::test]
async fn a_2026_hold_answered_through_input_required_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "confirm");
    let human = Client2026::default();
    let s = serve(dir.path(), &cfg, human.clone()).await;

    // rmcp's own MRTR loop: asked once (the same question as elicitation), applied once.
    let r = s
        .client
        .call_tool(params("apply_patch", &add_patch("auto.txt")))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert_eq!(r.structured_content.unwrap()["status"], "applied");
    let asked = human.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0].starts_with("Approve this call? apply_patch"),
        "{asked:?}"
    );

    // By hand: the retry with the grant applies; the same requestState again is refused.
    let args = add_patch("a.txt");
    let (state, question) = held(&s, "apply_patch", &args).await;
    assert!(question.contains("(approval appr-"), "{question}");
    let done = complete(
        s.client
            .call_tool_once(
                params("apply_patch", &args)
                    .with_input_responses(grant())
                    .with_request_state(state.clone()),
            )
            .await
            .unwrap(),
    );
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert_eq!(done.structured_content.unwrap()["status"], "applied");
    let replay = s
        .client
        .call_tool_once(
            params("apply_patch", &args)
                .with_input_responses(grant())
                .with_request_state(state.clone()),
        )
        .await
        .unwrap();
    assert_eq!(code(replay), "APPROVAL_CONFLICT");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ws/a.txt")).unwrap(),
        "once\n"
    );
    assert_eq!(patch_operations(&dir.path().join("store.db")), 2);

    // Altered, or moved to another call: no such hold for this caller.
    let args_b = add_patch("b.txt");
    let (state_b, _) = held(&s, "apply_patch", &args_b).await;
    let mut altered = state_b.clone();
    let last = altered.pop().unwrap();
    altered.push(if last == 'A' { 'B' } else { 'A' });
    for (args, state) in [(&args_b, altered), (&add_patch("c.txt"), state_b.clone())] {
        let r = s
            .client
            .call_tool_once(
                params("apply_patch", args)
                    .with_input_responses(grant())
                    .with_request_state(state),
            )
            .await
            .unwrap();
        assert_eq!(code(r), "APPROVAL_NOT_FOUND");
    }
    assert!(!dir.path().join("ws/b.txt").exists());
    assert!(!dir.path().join("ws/c.txt").exists());

    // The file the held patch would create appeared meanwhile: VERSION_CONFLICT, nothing written.
    std::fs::write(dir.path().join("ws/b.txt"), "theirs\n").unwrap();
    let stale = s
        .client
        .call_tool_once(
            params("apply_patch", &args_b)
                .with_input_responses(grant())
                .with_request_state(state_b),
        )
        .await
        .unwrap();
    assert_eq!(code(stale), "VERSION_CONFLICT");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ws/b.txt")).unwrap(),
        "theirs\n"
    );
    s.client.cancel().await.unwrap();
}

/// `tasks/get` until `want` holds, each round waiting for the process's next output or exit
/// (a `read_process` long poll), never a sleep.
async fn get_until(
    s: &Served,
    id: &str,
    process_id: &str,
    want: impl Fn(&TaskPayload) -> bool,
) -> TaskPayload {
    let mut cursor = 0;
    for _ in 0..200 {
        let t = s.client.get_task(GetTaskParams::new(id)).await.unwrap();
        if want(&t.task.payload) {
            return t.task.payload;
        }
        // Returns on new output or the exit (at once once both are behind us).
        let r = s
            .client
            .call_tool(params(
                "read_process",
                &json!({"process_id": process_id, "cursor": cursor, "wait_ms": 2000}),
            ))
            .await
            .unwrap();
        assert_ne!(r.is_error, Some(true), "{r:?}");
        cursor = r.structured_content.unwrap()["cursor"].as_u64().unwrap();
    }
    panic!("task {id} never reached the state wanted");
}

/// The process a task's operation started (task id = operation_id).
async fn process_of(s: &Served, id: &str) -> String {
    let op = s
        .client
        .call_tool(params("operation_status", &json!({"operation_id": id})))
        .await
        .unwrap();
    let v = op.structured_content.unwrap();
    assert_eq!(v["tool"], "exec_command", "{v}");
    v["process_id"].as_str().unwrap().to_string()
}

async fn start_task(s: &Served, args: &Value) -> String {
    match s
        .client
        .call_tool_once(params("exec_command", args))
        .await
        .unwrap()
    {
        CallToolResponse::Task(t) => {
            assert!(t.task.task_id.starts_with("op-"), "{t:?}");
            t.task.task_id
        }
        other => panic!("expected a task, got {other:?}"),
    }
}

#[tokio::test]
async fn a_task_mode_exec_works_completes_with_read_process_body_and_cancels() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "off");
    let s = serve(
        dir.path(),
        &cfg,
        Client2026 {
            tasks: true,
            ..Client2026::default()
        },
    )
    .await;

    // Runs until the test creates `go` (at most 5 s).
    let id = start_task(
        &s,
        &json!({"workspace_id": "w", "command": ["sh", "-c",
            "echo start; i=0; while [ ! -e go ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; echo end"]}),
    )
    .await;
    let process = process_of(&s, &id).await;
    let t = s.client.get_task(GetTaskParams::new(&id)).await.unwrap();
    assert_eq!(t.task.task.status, TaskStatus::Working, "{t:?}");
    std::fs::write(dir.path().join("ws/go"), "").unwrap();
    let done = get_until(&s, &id, &process, |p| {
        matches!(p, TaskPayload::Completed { .. })
    })
    .await;
    let TaskPayload::Completed { result } = done else {
        unreachable!()
    };
    let read = s
        .client
        .call_tool(params("read_process", &json!({"process_id": process})))
        .await
        .unwrap();
    let body = read.structured_content.unwrap();
    assert_eq!(result["structuredContent"], body);
    assert!(
        body["chunk"].as_str().unwrap().contains("start\nend\n"),
        "{body}"
    );

    // A 5 s command cancelled: terminated, the task cancelled.
    let id = start_task(&s, &json!({"workspace_id": "w", "command": ["sleep", "5"]})).await;
    let process = process_of(&s, &id).await;
    let t = s.client.get_task(GetTaskParams::new(&id)).await.unwrap();
    assert_eq!(t.task.task.status, TaskStatus::Working, "{t:?}");
    s.client
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .unwrap();
    get_until(&s, &id, &process, |p| matches!(p, TaskPayload::Cancelled)).await;
    let st = s
        .client
        .call_tool(params("process_status", &json!({"process_id": process})))
        .await
        .unwrap();
    assert_eq!(st.structured_content.unwrap()["termination"], "terminated");

    // A terminal is interactive: never a task.
    let r = s
        .client
        .call_tool_once(params(
            "exec_command",
            &json!({"workspace_id": "w", "command": ["true"], "tty": true}),
        ))
        .await
        .unwrap();
    assert_eq!(code(r), "INVALID_ARGUMENTS");
    s.client.cancel().await.unwrap();
}
