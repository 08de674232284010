//! The request builder: turns a [`ToolCall`] into the Cedar sub-requests it needs, from facts
//! alone (no disk, no clock), so the server and the policy test runner build identical requests.

use crate::action::Action;
pub use crate::command_facts::command_facts;
use crate::error::{ErrorCode, ToolError};
pub use crate::read_args::check_read_args;
use crate::wire::ToolCall;
use codespace_runner_fs::RelPath;
use serde_json::{Value, json};

/// Who is calling: becomes `context.session`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Client name (`local` on stdio; the token's client name over HTTP).
    pub client: String,
    /// `stdio` or `streamable-http`.
    pub transport: String,
    /// The person behind an OIDC token (`context.session.user`); None without OIDC.
    pub user: Option<crate::user::UserFacts>,
}

impl Session {
    /// The stdio session.
    pub fn stdio() -> Session {
        Session {
            client: "local".into(),
            transport: "stdio".into(),
            user: None,
        }
    }

    /// Who resolves a hold in this session: the user's id when a person is known, else the
    /// client (`context.approval.resolver`, the store's `resolved_by`).
    pub fn resolver(&self) -> &str {
        self.user.as_ref().map_or(&self.client, |u| &u.id)
    }
}

/// Facts about the workspace the call targets. Serialized into every audit row's recorded
/// request (fields added later need a default, so older rows still replay).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct WorkspaceFacts {
    /// Workspace id.
    pub id: String,
    /// Its profile (the principal).
    pub profile: String,
    /// Environment id.
    pub environment: String,
    /// Environment kind (`resource.workspace.environment.kind`).
    pub environment_kind: crate::config::EnvironmentKind,
    /// How the server reaches the environment's worker
    /// (`resource.workspace.environment.transport`; `in-process` for `host`).
    pub environment_transport: crate::config::EnvironmentTransport,
    /// Where the environment's worker runs (`resource.workspace.environment.host`): the ssh
    /// host, the container, `namespace/pod`; "" for `host`, `worker` and `command`.
    pub environment_host: String,
    /// Can the command sandbox be enforced here.
    pub sandbox: crate::facts::SandboxFact,
    /// Can a command's network be cut off.
    pub network_enforcement: crate::facts::NetworkEnforcement,
    /// The operator's network switch.
    pub network: crate::config::Network,
    /// The operator's approvals switch.
    pub approvals: crate::config::Approvals,
    /// Workspace-relative paths (files or directories) owned by the server itself.
    pub server_owned: Vec<String>,
    /// The operator's sandbox switch of the workspace (`resource.workspace.sandbox`).
    pub workspace_sandbox: crate::config::SandboxMode,
    /// Whether commands get secret masks (`resource.workspace.environment.secret_masking`).
    pub secret_masking: crate::facts::MaskingFact,
}

impl WorkspaceFacts {
    /// True when `path` is, or lies under, a server-owned path.
    pub fn is_server_owned(&self, path: &str) -> bool {
        self.server_owned.iter().any(|o| {
            path == o
                || (path.len() > o.len()
                    && path.starts_with(o.as_str())
                    && path.as_bytes().get(o.len()) == Some(&b'/'))
        })
    }
}

/// Facts about a managed process, for the process tools.
#[derive(Debug, Clone)]
pub struct ProcessFacts {
    /// The process id.
    pub id: String,
    /// True when the caller is the client that started it.
    pub same_client: bool,
    /// The command it runs.
    pub argv: Vec<String>,
    /// Whether it has a PTY.
    pub tty: bool,
    /// Names of the `env` variables it was started with.
    pub env_names: Vec<String>,
    /// Whether it was started as a background service.
    pub background: bool,
}

/// Facts about an approval hold, for `approval_resolve` and `operation_resume`
/// (`context.approval`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalFacts {
    /// How the answer arrives: `tool`, `elicitation`, `mrtr`, `cli` or `web`.
    pub channel: String,
    /// The client that asked for the hold.
    pub requested_by: String,
    /// The client (or operator) answering it.
    pub resolved_by: String,
    /// Who answers it: the user's id when the client's token names a person (OIDC), else the
    /// client (or operator) (`context.approval.resolver`).
    pub resolver: String,
    /// `grant` or `deny`.
    pub decision: String,
}

impl ApprovalFacts {
    /// The `context.approval` record (`resolver` is the resolving client or user, the name a
    /// reviewer policy matches).
    pub fn to_context(&self) -> Value {
        json!({
            "channel": self.channel,
            "requested_by": self.requested_by,
            "resolved_by": self.resolved_by,
            "resolver": self.resolver,
            "same_client": self.requested_by == self.resolved_by,
            "decision": self.decision,
        })
    }
}

/// One Cedar request of a tool call. Serialized into its audit row (redacted) so it can be
/// re-decided later; fields added later need a default.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SubRequest {
    /// The action (a tool, a sandbox capability, `confirm`, `network_connect`).
    pub action: Action,
    /// Workspace-relative normalized path (`.` for the root).
    #[serde(default)]
    pub path: String,
    /// apply_patch kind (add/update/delete/move_from/move_to), else "".
    #[serde(default)]
    pub kind: String,
    /// False for sandbox-shaping requests (`process_write`, `process_network`): their deny
    /// narrows the sandbox instead of refusing the call.
    #[serde(default)]
    pub gating: bool,
    /// The Cedar context as JSON.
    #[serde(default)]
    pub context: Value,
    /// What the audit log shows: the path or a command summary (never contents).
    #[serde(default)]
    pub subject: String,
    /// `resource.tool` when it is not the call's tool: the version-oracle `read` of an
    /// `apply_patch` `expected_versions` key asks exactly what a `read` of that path would.
    #[serde(default)]
    pub resource_tool: Option<String>,
    /// `resource.links`: how many names the file at `path` has (`st_nlink` of an existing
    /// non-directory; 1 for a directory, for the workspace root and for requests that name no
    /// file; 0 when the path does not exist). The builder is pure and says 1; the gateway fills
    /// the real count from disk ([`crate::links`]).
    #[serde(default)]
    pub links: i64,
    /// `network_connect` only: the connection's target (`resource.host`, `port`, `scheme`,
    /// `ip_class`, and `server_owned` for this server's own listener).
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetTarget>,
}

/// The target of one proxied connection, as decided (Operation attributes of `network_connect`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct NetTarget {
    /// The host as the command named it.
    pub host: String,
    /// The port.
    pub port: u16,
    /// `http` (absolute-form request) or `connect` (tunnel).
    pub scheme: String,
    /// `public` / `private` / `loopback` / `link_local` of the resolved address; empty before
    /// the name is looked up (then the Operation has no `ip_class` attribute).
    pub ip_class: String,
    /// The target is this server's own HTTP listener.
    pub server_owned: bool,
}

/// The `network_connect` request of one connection of process `process`.
pub fn connect_request(
    session: &Session,
    process: &ProcessFacts,
    target: &NetTarget,
) -> SubRequest {
    let ctx = json!({
        "session": session_ctx(session),
        "command": command_facts(&process.argv, process.tty),
        "process": {
            "id": process.id,
            "same_client": process.same_client,
            "command": command_facts(&process.argv, process.tty),
        },
    });
    let authority = if target.host.contains(':') {
        format!("[{}]:{}", target.host, target.port)
    } else {
        format!("{}:{}", target.host, target.port)
    };
    let mut r = sub(
        Action::NetworkConnect,
        ".",
        "",
        ctx,
        format!("{} {authority} ({})", target.scheme, process.id),
    );
    r.network = Some(target.clone());
    r
}

/// Brings a context recorded by an older build up to the current schema: commands recorded
/// before `env_names` existed had no variables.
pub fn upgrade_recorded_context(ctx: &mut Value) {
    for ptr in ["/command", "/process/command"] {
        if let Some(Value::Object(m)) = ctx.pointer_mut(ptr) {
            m.entry("env_names").or_insert_with(|| json!([]));
            m.entry("background").or_insert_with(|| json!(false));
        }
    }
    // Approval answers recorded before `resolver` existed: it is who resolved.
    if let Some(Value::Object(m)) = ctx.pointer_mut("/approval")
        && !m.contains_key("resolver")
    {
        let by = m.get("resolved_by").cloned().unwrap_or_else(|| json!(""));
        m.insert("resolver".into(), by);
    }
}

fn session_ctx(session: &Session) -> Value {
    match &session.user {
        None => json!({"client": session.client, "transport": session.transport}),
        Some(u) => json!({
            "client": session.client,
            "transport": session.transport,
            "user": u.to_context(),
        }),
    }
}

fn path_error(e: codespace_runner_fs::FsError) -> ToolError {
    ToolError::from(e)
}

fn sub(action: Action, path: &str, kind: &str, ctx: Value, subject: String) -> SubRequest {
    SubRequest {
        action,
        path: path.to_string(),
        kind: kind.to_string(),
        gating: true,
        context: ctx,
        subject,
        resource_tool: None,
        links: 1,
        network: None,
    }
}

/// The `context.process.command` record of a managed process: its argv, terminal and the
/// names of the `env` it was started with.
fn process_command_facts(pf: &ProcessFacts) -> Value {
    let mut cmd = command_facts(&pf.argv, pf.tty);
    if let Value::Object(m) = &mut cmd {
        m.insert("env_names".into(), json!(pf.env_names));
        m.insert("background".into(), json!(pf.background));
    }
    cmd
}

/// The sub-requests of a call and what the builder parsed on the way, so nothing downstream
/// parses it again: the typed action, the target paths in request order (a `read`'s paths, the
/// searched directory, a patch's touched paths, a command's cwd) and the parsed patch.
#[derive(Debug)]
pub struct Built {
    /// The call's own action.
    pub action: Action,
    /// The sub-requests.
    pub reqs: Vec<SubRequest>,
    /// The paths the call targets, parsed.
    pub targets: Vec<RelPath>,
    /// `apply_patch`: the parsed patch.
    pub patch: Option<codespace_runner_patch::Patch>,
}

/// Builds the sub-requests of a call. Request-builder failures are errors the caller turns into
/// refusals (a malformed path is `PATH_ESCAPE`, a malformed patch `INVALID_PATCH`).
pub fn build_requests(
    call: &ToolCall,
    session: &Session,
    process: Option<&ProcessFacts>,
) -> Result<Vec<SubRequest>, ToolError> {
    build(call, session, process).map(|b| b.reqs)
}

/// [`build_requests`], with what was parsed on the way.
pub fn build(
    call: &ToolCall,
    session: &Session,
    process: Option<&ProcessFacts>,
) -> Result<Built, ToolError> {
    let base = json!({ "session": session_ctx(session) });
    let with = |key: &str, v: Value| {
        let mut c = base.clone();
        if let Value::Object(m) = &mut c {
            m.insert(key.to_string(), v);
        }
        c
    };
    let tool = Action::Tool(call.name());
    let mut targets: Vec<RelPath> = Vec::new();
    let mut parsed_patch = None;
    let reqs = match call {
        ToolCall::WorkspaceInfo(_) | ToolCall::OperationStatus(_) | ToolCall::ProcessList(_) => {
            vec![sub(tool, ".", "", base.clone(), ".".into())]
        }
        // The operation ledger (issue 31): the call on its operation's workspace; `operation_diff`
        // then decides each path it shows, `operation_revert` the reverse patch as `apply_patch`.
        ToolCall::OperationDiff(p) => {
            vec![sub(tool, ".", "", base.clone(), p.operation_id.clone())]
        }
        ToolCall::OperationRevert(p) => {
            vec![sub(tool, ".", "", base.clone(), p.operation_id.clone())]
        }
        ToolCall::Read(p) => {
            // `paths`: one `read` sub-request per path, each decided as a single `read` of it
            // (all gating: a denied one refuses the call).
            check_read_args(p)?;
            let paths: Vec<&str> = match &p.paths {
                Some(list) => list.iter().map(String::as_str).collect(),
                None => p.path.as_deref().into_iter().collect(),
            };
            let mut out = Vec::with_capacity(paths.len());
            for path in paths {
                let rel = RelPath::parse(path).map_err(path_error)?;
                out.push(sub(
                    tool,
                    rel.as_str(),
                    "",
                    base.clone(),
                    rel.as_str().into(),
                ));
                targets.push(rel);
            }
            out
        }
        ToolCall::Find(p) => {
            let glob = p.glob.clone().unwrap_or_default();
            let rel = match p.path.as_deref().filter(|s| !s.is_empty()) {
                Some(path) => RelPath::parse(path).map_err(path_error)?,
                None => RelPath::root(),
            };
            let out = vec![sub(
                tool,
                rel.as_str(),
                "",
                with("find", json!({"glob": glob})),
                match (glob.is_empty(), rel.is_root()) {
                    (true, _) => rel.as_str().into(),
                    (false, true) => format!("glob {glob}"),
                    (false, false) => format!("{} glob {glob}", rel.as_str()),
                },
            )];
            targets.push(rel);
            out
        }
        ToolCall::Grep(p) => {
            // One request on the searched directory; every file is then withheld unless a `read`
            // of it would be allowed.
            let rel = match p.path.as_deref().filter(|s| !s.is_empty()) {
                Some(path) => RelPath::parse(path).map_err(path_error)?,
                None => RelPath::root(),
            };
            let out = vec![sub(
                tool,
                rel.as_str(),
                "",
                base.clone(),
                rel.as_str().into(),
            )];
            targets.push(rel);
            out
        }
        ToolCall::FindFiles(_) => vec![sub(tool, ".", "", base.clone(), ".".into())],
        ToolCall::ApplyPatch(p) => {
            let patch = codespace_runner_patch::parse(&p.patch)
                .map_err(|e| ToolError::new(ErrorCode::InvalidPatch, e.to_string()))?;
            let touched = patch.touched_paths();
            let files = i64::try_from(touched.len()).unwrap_or(i64::MAX);
            let ctx = with("patch", json!({ "files": files }));
            let mut out = Vec::with_capacity(touched.len());
            for (path, kind) in touched {
                let rel = RelPath::parse(&path).map_err(path_error)?;
                let kind = touch_kind_name(kind);
                out.push(sub(
                    tool,
                    rel.as_str(),
                    kind,
                    ctx.clone(),
                    format!("{kind} {}", rel.as_str()),
                ));
                targets.push(rel);
            }
            // Version oracle: a version is only compared (and named in a conflict) for a path the
            // caller may read, so each expected_versions key is also the `read` a later `read` of
            // that path would make.
            for key in p.expected_versions.keys() {
                let rel = RelPath::parse(key).map_err(path_error)?;
                let mut r = sub(
                    Action::READ,
                    rel.as_str(),
                    "",
                    base.clone(),
                    rel.as_str().into(),
                );
                r.resource_tool = Some("read".into());
                out.push(r);
            }
            parsed_patch = Some(patch);
            out
        }
        ToolCall::WriteFile(p) => {
            // A whole-file write (issue 31): one patch of one `Write` hunk. Its path is decided
            // as `write_file` and as the `apply_patch` a patch of that file would ask (same
            // kind, `resource.tool` "apply_patch"), so a policy on either refuses it; the
            // `expected_version` is the version oracle's `read`, as for `apply_patch`.
            let rel = RelPath::parse(&p.path).map_err(path_error)?;
            let mode = match p.mode {
                crate::wire::WriteFileMode::Replace => codespace_runner_patch::WriteMode::Replace,
                crate::wire::WriteFileMode::Append => codespace_runner_patch::WriteMode::Append,
                crate::wire::WriteFileMode::Create => codespace_runner_patch::WriteMode::Create,
            };
            let patch = codespace_runner_patch::Patch {
                hunks: vec![codespace_runner_patch::Hunk::Write {
                    path: rel.as_str().to_string(),
                    data: p.bytes()?,
                    mode,
                }],
            };
            let ctx = with("patch", json!({ "files": 1 }));
            let mut out = Vec::with_capacity(3);
            for (_, kind) in patch.touched_paths() {
                let kind = touch_kind_name(kind);
                let subject = format!("{kind} {}", rel.as_str());
                out.push(sub(tool, rel.as_str(), kind, ctx.clone(), subject.clone()));
                let mut as_patch = sub(
                    Action::APPLY_PATCH,
                    rel.as_str(),
                    kind,
                    ctx.clone(),
                    subject,
                );
                as_patch.resource_tool = Some("apply_patch".into());
                out.push(as_patch);
            }
            if p.expected_version.is_some() {
                let mut r = sub(
                    Action::READ,
                    rel.as_str(),
                    "",
                    base.clone(),
                    rel.as_str().into(),
                );
                r.resource_tool = Some("read".into());
                out.push(r);
            }
            targets.push(rel);
            parsed_patch = Some(patch);
            out
        }
        ToolCall::ExecCommand(p) => {
            let exec = exec_facts(p, session)?;
            let cwd = exec.cwd.as_str();
            let mut out = vec![sub(tool, cwd, "", exec.ctx.clone(), exec.summary.clone())];
            // One more `exec_command` request per variable name: Cedar has no "any element of a
            // set is like …", so a guardrail on name patterns (`LD_*`) asks each name alone.
            for name in &exec.env_names {
                let mut c = exec.ctx.clone();
                if let Value::Object(m) = &mut c {
                    m.insert("env_var".into(), json!({ "name": name }));
                }
                out.push(sub(tool, cwd, "", c, format!("env {name}")));
            }
            // The write scope's first candidate is the command's cwd; the others (the
            // operator's `command_write_paths` and `.git`) are decided when the command starts
            // ([`write_scope_requests`]).
            out.extend(write_scope_requests(&exec, std::slice::from_ref(&exec.cwd)));
            let mut net = sub(
                Action::ProcessNetwork,
                cwd,
                "",
                exec.ctx.clone(),
                exec.summary,
            );
            net.gating = false;
            out.push(net);
            targets.push(exec.cwd);
            out
        }
        ToolCall::ApprovalCreate(p) => {
            // The held call's own requests, then the request to hold it.
            let inner = ToolCall::parse(p.tool.as_str(), &p.arguments).map_err(|e| {
                let why = match e {
                    crate::wire::CallParseError::UnknownTool(t) => format!("unknown tool `{t}`"),
                    crate::wire::CallParseError::InvalidArguments(m) => m,
                };
                ToolError::new(
                    ErrorCode::InvalidArguments,
                    format!("arguments for {}: {why}", p.tool.as_str()),
                )
            })?;
            let mut out = build_requests(&inner, session, None)?;
            out.push(sub(tool, ".", "", base.clone(), p.tool.as_str().into()));
            out
        }
        ToolCall::ApprovalResolve(p) => {
            // The caller answering its own hold over the tool, unless the gateway says otherwise
            // ([`with_approval`]).
            let facts = ApprovalFacts {
                channel: "tool".into(),
                requested_by: session.client.clone(),
                resolved_by: session.client.clone(),
                resolver: session.resolver().to_string(),
                decision: p.decision.as_str().into(),
            };
            vec![sub(
                tool,
                ".",
                "",
                with("approval", facts.to_context()),
                format!("{} {}", p.decision.as_str(), p.approval_id),
            )]
        }
        ToolCall::OperationResume(p) => {
            let facts = ApprovalFacts {
                channel: "tool".into(),
                requested_by: session.client.clone(),
                resolved_by: session.client.clone(),
                resolver: session.resolver().to_string(),
                decision: "grant".into(),
            };
            vec![sub(
                tool,
                ".",
                "",
                with("approval", facts.to_context()),
                p.approval_id.clone(),
            )]
        }
        ToolCall::WriteStdin(_)
        | ToolCall::ReadProcess(_)
        | ToolCall::ProcessStatus(_)
        | ToolCall::ProcessResize(_)
        | ToolCall::TerminateProcess(_) => {
            let Some(pf) = process else {
                return Err(ToolError::new(
                    ErrorCode::ProcessNotFound,
                    "unknown process id",
                ));
            };
            let ctx = with(
                "process",
                json!({
                    "id": pf.id,
                    "same_client": pf.same_client,
                    "command": process_command_facts(pf),
                }),
            );
            vec![sub(tool, ".", "", ctx, pf.id.clone())]
        }
    };
    Ok(Built {
        action: tool,
        reqs,
        targets,
        patch: parsed_patch,
    })
}

/// The facts of an `exec_command` call every one of its requests carries: its checked `cwd`,
/// `context` (session and `command`), the audit summary and the `env` names.
#[derive(Debug, Clone)]
pub struct ExecFacts {
    /// The working directory (workspace-relative, `.` for the root).
    pub cwd: RelPath,
    /// `context` with `session` and `command`.
    pub ctx: Value,
    /// What the audit log shows for the command (the first 200 characters of its line).
    pub summary: String,
    /// The names of the call's `env` (sorted).
    pub env_names: Vec<String>,
}

/// Checks an `exec_command` call's argv, `env` and `cwd` and builds the facts its requests
/// share. Errors are the refusals the builder makes before Cedar is asked.
pub fn exec_facts(
    p: &crate::wire::ExecCommandParams,
    session: &Session,
) -> Result<ExecFacts, ToolError> {
    if p.command.first().is_none_or(|a| a.is_empty()) {
        return Err(ToolError::new(
            ErrorCode::InvalidCommand,
            "command must be a non-empty argv whose first word is not empty",
        ));
    }
    if p.command.iter().any(|a| a.contains('\0')) {
        return Err(ToolError::new(
            ErrorCode::InvalidCommand,
            "command words must not contain NUL bytes",
        ));
    }
    let env_names = exec_env_names(p.env.as_ref())?;
    let cwd = match p.cwd.as_deref().filter(|s| !s.is_empty()) {
        Some(c) => RelPath::parse(c).map_err(path_error)?,
        None => RelPath::root(),
    };
    let mut cmd = command_facts(&p.command, p.tty.unwrap_or(false));
    if let Value::Object(m) = &mut cmd {
        m.insert("env_names".into(), json!(env_names));
        m.insert("background".into(), json!(p.background.unwrap_or(false)));
    }
    let summary = cmd
        .get("line")
        .and_then(Value::as_str)
        .unwrap_or("")
        .chars()
        .take(200)
        .collect::<String>();
    let mut ctx = json!({ "session": session_ctx(session) });
    if let Value::Object(m) = &mut ctx {
        m.insert("command".into(), cmd);
    }
    Ok(ExecFacts {
        cwd,
        ctx,
        summary,
        env_names,
    })
}

/// The `process_write` requests of a command's write scope: one per candidate directory
/// (resource path = the candidate, the command's facts in the context), non-gating (a deny
/// narrows where the command may write). The subject is `write <path>`.
pub fn write_scope_requests(exec: &ExecFacts, candidates: &[RelPath]) -> Vec<SubRequest> {
    candidates
        .iter()
        .map(|c| {
            let mut s = sub(
                Action::ProcessWrite,
                c.as_str(),
                "",
                exec.ctx.clone(),
                format!("write {}", c.as_str()),
            );
            s.gating = false;
            s
        })
        .collect()
}

/// The candidates of a command's write scope, each once, in order: its `cwd`, the operator's
/// `command_write_paths`, then `.git` (the git metadata every command gets read-only unless a
/// policy permits `process_write` there) and any `extra` (nested `.git` the gateway found).
pub fn write_scope_candidates(
    cwd: &RelPath,
    configured: &[String],
    extra: &[RelPath],
) -> Vec<RelPath> {
    let mut out: Vec<RelPath> = vec![cwd.clone()];
    let git = RelPath::parse(".git").ok();
    for c in configured
        .iter()
        .filter_map(|c| RelPath::parse(c).ok())
        .chain(git)
        .chain(extra.iter().cloned())
    {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// The stage of a hook (issue 31): `before_patch` runs on the staged patched tree before
/// anything is written, `after_patch` once the patch is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookStage {
    /// Before the commit, on the staged view.
    BeforePatch,
    /// After the commit.
    AfterPatch,
}

impl HookStage {
    /// The wire and Cedar spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            HookStage::BeforePatch => "before_patch",
            HookStage::AfterPatch => "after_patch",
        }
    }
}

/// The `exec_command` a hook's command is decided and started as: at the workspace root, no
/// terminal, no `env` of the caller.
pub fn hook_exec_params(workspace: &str, argv: &[String]) -> crate::wire::ExecCommandParams {
    crate::wire::ExecCommandParams {
        workspace_id: workspace.to_string(),
        command: argv.to_vec(),
        tty: None,
        timeout_ms: None,
        yield_ms: None,
        operation_key: None,
        env: None,
        cwd: None,
        background: None,
        stderr: None,
    }
}

/// `context.hook` of a hook's requests (`{stage, command}`, the command as its quoted line),
/// and that line.
pub fn hook_facts(stage: HookStage, argv: &[String]) -> (Value, String) {
    let line = command_facts(argv, false)
        .get("line")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    (json!({ "stage": stage.as_str(), "command": line }), line)
}

/// Sets `context.hook` of a request's context to `facts` ([`hook_facts`]).
pub fn with_hook_context(ctx: &mut Value, facts: &Value) {
    if let Value::Object(m) = ctx {
        m.insert("hook".into(), facts.clone());
    }
}

/// The requests of one hook run of `workspace` (issue 31): the `hook` request (resource the
/// workspace root, `context.hook = {stage, command}` with `command` the argv's quoted line),
/// then the exec sub-requests its command gets as an `exec_command` at the root (the command,
/// its `process_write` of the root, `process_network`), each carrying `context.hook` too.
/// Errors are the refusals of a malformed argv.
pub fn hook_requests(
    workspace: &str,
    session: &Session,
    stage: HookStage,
    argv: &[String],
) -> Result<Vec<SubRequest>, ToolError> {
    let call = ToolCall::ExecCommand(hook_exec_params(workspace, argv));
    let exec = build_requests(&call, session, None)?;
    let (facts, line) = hook_facts(stage, argv);
    let with_hook = |mut ctx: Value| {
        with_hook_context(&mut ctx, &facts);
        ctx
    };
    let ctx = exec.first().map_or_else(
        || json!({ "session": session_ctx(session) }),
        |r| r.context.clone(),
    );
    let summary: String = format!("{} {line}", stage.as_str())
        .chars()
        .take(200)
        .collect();
    let mut out = vec![sub(Action::Hook, ".", "", with_hook(ctx), summary)];
    out.extend(exec.into_iter().map(|mut r| {
        r.context = with_hook(r.context);
        r
    }));
    Ok(out)
}

/// Replaces `context.approval` of every request with `facts`.
pub fn with_approval(reqs: &mut [SubRequest], facts: &ApprovalFacts) {
    for r in reqs {
        if let Value::Object(m) = &mut r.context {
            m.insert("approval".into(), facts.to_context());
        }
    }
}

/// The `confirm` requests of a call's requests: one per distinct request the tool itself makes
/// (the version-oracle `read`s are not mutations and get none). A permit on `confirm` holds the
/// call for a human; `resource.tool` stays the call's tool, except for the `apply_patch`
/// request a `write_file` also asks, whose `confirm` says `apply_patch` (so a hold policy on
/// patches holds whole-file writes too).
pub fn confirm_requests(reqs: &[SubRequest]) -> Vec<SubRequest> {
    let mut out: Vec<SubRequest> = Vec::new();
    for r in reqs
        .iter()
        .filter(|r| r.resource_tool.is_none() || r.action == Action::APPLY_PATCH)
    {
        let c = SubRequest {
            action: Action::Confirm,
            gating: false,
            ..r.clone()
        };
        let dup = out.iter().any(|o| {
            o.path == c.path
                && o.kind == c.kind
                && o.context == c.context
                && o.links == c.links
                && o.resource_tool == c.resource_tool
        });
        if !dup {
            out.push(c);
        }
    }
    out
}

/// The variable names of an `exec_command` `env`, checked: a bad name or a value with NUL is
/// `INVALID_ARGUMENTS` (nothing is decided or started). Sorted, as the map is.
pub fn exec_env_names(
    env: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<Vec<String>, ToolError> {
    let Some(env) = env else {
        return Ok(Vec::new());
    };
    let mut names = Vec::with_capacity(env.len());
    for (name, value) in env {
        if !crate::config::is_env_name(name) {
            return Err(ToolError::new(
                ErrorCode::InvalidArguments,
                format!(
                    "env: `{}` is not a variable name (a letter or `_`, then letters, digits \
                     and `_`)",
                    name.chars().take(64).collect::<String>()
                ),
            ));
        }
        if value.contains('\0') {
            return Err(ToolError::new(
                ErrorCode::InvalidArguments,
                format!("env: the value of `{name}` contains a NUL byte"),
            ));
        }
        names.push(name.clone());
    }
    Ok(names)
}

/// The Cedar spelling of a patch touch kind.
pub fn touch_kind_name(kind: codespace_runner_patch::TouchKind) -> &'static str {
    use codespace_runner_patch::TouchKind;
    match kind {
        TouchKind::Add => "add",
        TouchKind::Update => "update",
        TouchKind::Delete => "delete",
        TouchKind::MoveFrom => "move_from",
        TouchKind::MoveTo => "move_to",
    }
}

/// The `read_skill` request of operator skill `name` (issue 31): the resource is the workspace
/// root (`path` "."), the skill in `context.skill.name`. Skills are server-wide; the server asks
/// this under every configured workspace and shows a skill only when all of them allow it.
pub fn skill_request(session: &Session, name: &str) -> SubRequest {
    sub(
        Action::ReadSkill,
        ".",
        "",
        json!({ "session": session_ctx(session), "skill": { "name": name } }),
        format!("skill {name}"),
    )
}

/// A sub-request for a single path (used by `find` filtering and capability probes).
pub fn path_request(action: Action, path: &str, kind: &str, session: &Session) -> SubRequest {
    sub(
        action,
        path,
        kind,
        json!({ "session": session_ctx(session) }),
        path.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_hands_on_the_paths_and_the_patch_it_parsed() {
        let s = Session::stdio();
        let read =
            ToolCall::parse("read", &json!({"workspace_id": "w", "path": "./a//b.txt"})).unwrap();
        let b = build(&read, &s, None).unwrap();
        assert_eq!(b.action, Action::READ);
        assert_eq!(
            b.targets.iter().map(RelPath::as_str).collect::<Vec<_>>(),
            ["a/b.txt"]
        );
        assert!(b.patch.is_none());
        let patch = ToolCall::parse(
            "apply_patch",
            &json!({"workspace_id": "w", "patch": "*** Begin Patch\n*** Add File: x/y.txt\n+y\n*** End Patch\n"}),
        )
        .unwrap();
        let b = build(&patch, &s, None).unwrap();
        assert_eq!(b.action, Action::APPLY_PATCH);
        assert_eq!(
            b.targets.iter().map(RelPath::as_str).collect::<Vec<_>>(),
            ["x/y.txt"]
        );
        assert_eq!(b.patch.map(|p| p.touched_paths().len()), Some(1));
        assert_eq!(
            b.reqs.len(),
            build_requests(&patch, &s, None).unwrap().len()
        );
    }

    #[test]
    fn command_facts_prefixes_and_shell() {
        let argv: Vec<String> = ["/usr/bin/git", "push", "origin", "main"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let f = command_facts(&argv, false);
        assert_eq!(f["program"], "git");
        assert_eq!(f["prefixes"], json!(["git", "git push", "git push origin"]));
        assert_eq!(f["via_shell"], false);
        let sh: Vec<String> = ["bash", "-lc", "echo 'hi'"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let f = command_facts(&sh, true);
        assert_eq!(f["via_shell"], true);
        assert_eq!(f["line"], "bash -lc 'echo '\\''hi'\\'''");
    }

    #[test]
    fn server_owned_prefix_match() {
        let f = WorkspaceFacts {
            id: "w".into(),
            profile: "read-only".into(),
            environment: "local".into(),
            environment_kind: crate::config::EnvironmentKind::Host,
            environment_transport: crate::config::EnvironmentTransport::InProcess,
            environment_host: String::new(),
            sandbox: crate::facts::SandboxFact::Enforced,
            network_enforcement: crate::facts::NetworkEnforcement::Enforced,
            network: crate::config::Network::Restricted,
            approvals: crate::config::Approvals::Off,
            server_owned: vec!["policies".into(), "codespace.json".into()],
            workspace_sandbox: crate::config::SandboxMode::Required,
            secret_masking: crate::facts::MaskingFact::Enforced,
        };
        assert!(f.is_server_owned("policies"));
        assert!(f.is_server_owned("policies/base/x.cedar"));
        assert!(!f.is_server_owned("policies2/x"));
        assert!(f.is_server_owned("codespace.json"));
        assert!(!f.is_server_owned("src/main.rs"));
    }
}
