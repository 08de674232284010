//! `workspace_info`: server identity and, for a selected workspace, its effective execution
//! contract. Permissions and availability are Cedar decisions, not profile names.

use crate::error::ToolError;
use crate::gateway::Authorized;
use crate::policy::Action;
use crate::request::{SubRequest, build_requests, path_request};
use crate::wire::{
    Available, EnvironmentInfo, ExecCommandParams, ExecutionInfo, FIND_MAX_PATHS, FileCapabilities,
    FilesInfo, IsolationInfo, NetworkInfo, Permissions, PidsInfo, ProcessCapabilities, ProcessInfo,
    ProcessLifetime, READ_MAX_BYTES, SerializationInfo, ToolCall, ToolchainInfo, TtyCapabilities,
    WorkspaceInfoResult,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// `workspace_info` on a workspace: the server block (`server`, from the gateway) with
/// the workspace's effective execution contract.
pub(crate) async fn workspace_info(
    auth: &Authorized<'_>,
    mut out: WorkspaceInfoResult,
) -> Result<WorkspaceInfoResult, ToolError> {
    let ws = auth.ws();
    let id = ws.facts.id.as_str();
    // Every answer below that Cedar gives depends on the policy set, the workspace's facts,
    // the session and the operator's write-path candidates only: decided once per policy set.
    let key = probe_key(auth);
    let probed = auth.probe_memo(&key, || probe(auth));
    let Probed {
        read,
        find,
        write,
        exec,
        grep,
        find_files,
        ref caps,
        ref write_paths,
    } = *probed;
    let env_kind = ws.facts.environment_kind.as_str();
    let host = ws.facts.environment_kind == crate::config::EnvironmentKind::Host;
    let process_available = exec && host;
    let process = ProcessInfo {
        available: process_available,
        capabilities: process_available.then_some(ProcessCapabilities {
            handles: true,
            survives_request_end: true,
            write_stdin: true,
            incremental_read: true,
            terminate: true,
            output_combined: true,
            tty: TtyCapabilities {
                supported: true,
                default: false,
                initial_rows: 24,
                initial_cols: 80,
                resize_supported: true,
            },
            lifetime: ProcessLifetime {
                owner: "gateway",
                client_disconnect: "keep_running",
                gateway_shutdown: "terminate",
                restart_recovery: "none",
            },
        }),
    };
    // What the environment's own kernel offers, asked of its runner (a worker answers for
    // its host): never assumed from this server's host.
    let kernel = ws.runner.probe_sandbox().await.ok();
    let sandbox_on = ws.facts.sandbox == crate::facts::SandboxFact::Enforced
        && ws.facts.workspace_sandbox != crate::config::SandboxMode::Off
        && kernel
            .as_ref()
            .is_some_and(crate::tools::process::kernel_sandboxes);
    // A worker's workspace: its commands' task limit as the worker's host enforces it.
    let pids = if ws.is_remote() {
        let p = kernel.and_then(|k| k.pids);
        PidsInfo {
            limit: p.map_or(0, |p| p.limit),
            mechanism: p.map_or("none", |p| p.mechanism.as_str()),
        }
    } else {
        let p = auth.host.pids_isolation();
        PidsInfo {
            limit: p.limit,
            mechanism: p.mechanism.as_str(),
        }
    };
    let ws_config = auth.ws_config();
    // Names only: the absolute paths behind them are the server's business.
    let read_path_names: Vec<String> = ws_config
        .map(|w| w.read_paths.keys().cloned().collect())
        .unwrap_or_default();
    // The toolchains found at start: names and the read path each became, never the paths.
    let toolchains: Vec<ToolchainInfo> = ws_config
        .map(|w| {
            w.toolchains
                .iter()
                .map(|(name, read_path)| ToolchainInfo {
                    name: name.clone(),
                    read_path: read_path.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    let limits = &auth.config.limits;
    // `network: proxy` with the sandbox: the proxy's address inside each command's namespace.
    let proxy = (ws.facts.network == crate::config::Network::Proxy
        && ws.facts.workspace_sandbox != crate::config::SandboxMode::Off)
        .then(crate::gateway::net::proxy_address);
    let execution = ExecutionInfo {
        environment: EnvironmentInfo {
            kind: env_kind,
            client_selectable: false,
            exec_supported: host,
            file_read_supported: true,
            file_write_supported: host,
        },
        permissions: Permissions { read, write, exec },
        capabilities: caps.clone(),
        files: FilesInfo {
            read: Available { available: read },
            find: Available { available: find },
            patch: Available {
                available: write && host,
            },
            grep: Available { available: grep },
            find_files: Available {
                available: find_files,
            },
            capabilities: FileCapabilities {
                read_range: true,
                find_pagination: true,
                read_max_bytes: READ_MAX_BYTES,
                find_max_paths: FIND_MAX_PATHS,
                // Larger files are FILE_TOO_LARGE for read / apply_patch.
                max_hash_bytes: limits.max_hash_bytes,
                max_patch_file_bytes: limits.max_patch_file_bytes,
                grep_max_matches: crate::wire::GREP_MAX_MATCHES,
                grep_max_file_bytes: crate::wire::GREP_MAX_FILE_BYTES,
                grep_max_line_chars: crate::wire::GREP_MAX_LINE_CHARS,
                max_walk_entries: limits.max_walk_entries,
            },
        },
        process,
        serialization: SerializationInfo {
            scope: "workspace",
            request_conflict: "wait-fifo",
            process_conflict: "reject",
            queue_durable: false,
            max_waiters_per_resource: limits.max_waiters,
            queue_full_error: "RESOURCE_QUEUE_FULL",
            conflict_error: "WORKSPACE_BUSY",
            live_process_holds_mutation_lease: true,
            read_while_process_live: true,
            find_while_process_live: true,
            patch_while_process_live: false,
            // Whose live foreground processes block a mutation (the operator's switch);
            // background processes (`exec_command` `background: true`) never do.
            lease_scope: ws_config.map_or("workspace", |w| w.lease_scope.as_str()),
            background_process_holds_mutation_lease: false,
        },
        isolation: IsolationInfo {
            file_tools_workspace_scoped: true,
            command_sandbox: if sandbox_on { "linux-sandbox" } else { "none" },
            sandbox: ws.facts.workspace_sandbox.as_str(),
            read_paths: read_path_names,
            write_paths: sandbox_on.then(|| write_paths.clone()),
            toolchains,
            pids,
            secret_masking: ws.facts.secret_masking.as_str(),
            kernel: kernel.map(|k| crate::wire::KernelInfo {
                landlock_abi: k.landlock_abi,
                seccomp: k.seccomp,
                user_namespaces: k.user_namespaces,
                net_namespaces: k.net_namespaces,
                mount_namespaces: k.mount_namespaces,
            }),
            sandbox_helper: auth
                .processes
                .helper_exe
                .as_deref()
                .filter(|_| sandbox_on && !ws.is_remote())
                .map(|exe| codespace_runner_sandbox::HelperKind::of(exe).as_str()),
        },
        network: NetworkInfo {
            policy: ws.facts.network.as_str(),
            // In another environment, the command's network is held by that environment's
            // sandbox: enforced only where its kernel holds the sandbox (never this host's
            // facts alone).
            enforcement: if ws.is_remote() && !sandbox_on {
                crate::facts::NetworkEnforcement::None.as_str()
            } else {
                ws.facts.network_enforcement.as_str()
            },
            client_may_escalate: false,
            proxy,
        },
        approvals: ws.facts.approvals.as_str(),
        approval_channels: crate::gateway::approvals::APPROVAL_CHANNELS,
    };
    out.workspace_id = Some(id.to_string());
    out.profile = Some(ws.facts.profile.clone());
    out.execution = Some(Box::new(execution));
    out.environment = match auth.config.environments.get(&ws.facts.environment) {
        None => None,
        Some(env) => {
            // The dispatcher tried to reach the worker just before: its state now.
            let worker = auth.workers.get(&env.id).map(|w| w.status());
            Some(crate::environments::environment_status(env, worker))
        }
    };
    Ok(out)
}

/// What `workspace_info` asks Cedar: the permission booleans, the capability verdicts and the
/// write scope of a command at the root.
struct Probed {
    read: bool,
    find: bool,
    write: bool,
    exec: bool,
    grep: bool,
    find_files: bool,
    caps: BTreeMap<&'static str, crate::wire::Capability>,
    write_paths: crate::wire::WritePaths,
}

/// The probe memo's key: everything besides the policy set that the probes' answers depend on
/// (the workspace's facts are its Cedar entities; the session is `context.session`).
fn probe_key(auth: &Authorized<'_>) -> String {
    let (ws, session) = (auth.ws(), auth.session());
    let facts = serde_json::to_string(&ws.facts).unwrap_or_default();
    let write_paths = auth.config.command_write_paths(&ws.facts.id).join("\0");
    format!(
        "workspace_info\0{facts}\0{}\0{}\0{write_paths}",
        session.client, session.transport
    )
}

/// Decides every probe of `workspace_info` (quietly: probes are not audited).
fn probe(auth: &Authorized<'_>) -> Probed {
    let (ws, session) = (auth.ws(), auth.session());
    let id = ws.facts.id.as_str();
    // "May this profile ever do it here": one probe request per capability.
    let exec_probe = ToolCall::ExecCommand(ExecCommandParams {
        workspace_id: id.to_string(),
        command: vec!["true".into()],
        tty: None,
        timeout_ms: None,
        yield_ms: None,
        operation_key: None,
        env: None,
        cwd: None,
        background: None,
        stderr: None,
    });
    let mut probes: Vec<SubRequest> = vec![
        path_request(Action::READ, ".", "", session),
        path_request(Action::FIND, ".", "", session),
        path_request(Action::APPLY_PATCH, ".", "update", session),
        path_request(Action::GREP, ".", "", session),
        path_request(Action::FIND_FILES, ".", "", session),
    ];
    // The probe is a fixed, valid call: a build error leaves its requests out (exec then
    // reads as not allowed unless the capability probes say otherwise).
    probes.extend(build_requests(&exec_probe, session, None).unwrap_or_default());
    let d = auth.decide_quietly(Action::WORKSPACE_INFO, &probes);
    // Each capability over a documented probe set: allowed / denied / conditional. The
    // booleans are true when allowed or conditional (a host should try).
    let caps = crate::tools::capabilities::capabilities(auth);
    let possible = |cap: &str| caps.get(cap).is_some_and(|c| c.possible());
    // A capability is named by its action, but for `write` (`apply_patch`) and `exec`
    // (`exec_command`).
    let allowed = |action: Action| {
        d.allows(action)
            || possible(match action {
                Action::APPLY_PATCH => "write",
                Action::EXEC_COMMAND => "exec",
                other => other.as_str(),
            })
    };
    let (read, find, write, exec) = (
        allowed(Action::READ),
        allowed(Action::FIND),
        allowed(Action::APPLY_PATCH),
        allowed(Action::EXEC_COMMAND),
    );
    let (grep, find_files) = (allowed(Action::GREP), allowed(Action::FIND_FILES));
    Probed {
        read,
        find,
        write,
        exec,
        grep,
        find_files,
        write_paths: write_paths_view(auth, id),
        caps,
    }
}

/// The write scope of a command at the workspace root whose facts no policy names
/// (`execution.isolation.write_paths`): the operator's candidates and `.git`, each decided
/// (quietly) like a command's. A policy that reads `context.command` may grant a given
/// command more or less: `exec_command`'s result shows the scope each command got.
fn write_paths_view(auth: &Authorized<'_>, id: &str) -> crate::wire::WritePaths {
    let configured = auth.config.command_write_paths(id);
    let root = codespace_runner_fs::RelPath::root();
    let candidates = crate::request::write_scope_candidates(&root, &configured, &[]);
    let mut ctx = json!({
        "session": {"client": auth.session().client, "transport": auth.session().transport},
    });
    if let Value::Object(m) = &mut ctx {
        m.insert("command".into(), crate::request::command_facts(&[], false));
    }
    let exec = crate::request::ExecFacts {
        cwd: root,
        ctx,
        summary: String::new(),
        env_names: Vec::new(),
    };
    let reqs = crate::request::write_scope_requests(&exec, &candidates);
    let d = auth.decide_quietly(Action::EXEC_COMMAND, &reqs);
    let mut view = crate::wire::WritePaths::default();
    for (c, sub) in candidates.iter().zip(&d.subs) {
        let list = if sub.allowed {
            &mut view.writable
        } else {
            &mut view.read_only
        };
        list.push(c.as_str().to_string());
    }
    view
}
