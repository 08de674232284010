//! `codespace worker --stdio | --socket PATH [--allow-uid UID]`: serves the worker protocol
//! (`codespace-runner-worker`) through a handler the caller passes to [`run`]. The secret comes
//! as the first line of stdin (never argv, which `ps` and ssh logs show; never the environment,
//! which the worker's children would inherit); over stdio the frames follow that line; on a
//! socket the worker prints `listening` on stdout once it accepts. The binary serves
//! [`RunnerHandler`]: the runner protocol (`codespace_runner_api::Call`, answered by the
//! engine's standalone runner, [`codespace_engine::worker_runner`]) and `ping`.

use anyhow::{Context, Result, anyhow};
use codespace_runner_worker::handshake::read_secret_line;
use codespace_runner_worker::{BoxFuture, Handler, Identity};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// Where the worker serves.
#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// Serve one gateway over stdin/stdout (ssh, `podman exec -i`, `kubectl exec -i`).
    #[arg(long, required_unless_present = "socket", conflicts_with = "socket")]
    pub stdio: bool,
    /// Listen on this Unix socket (created 0600 in a directory only this uid may enter).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// The uid a connecting gateway must have (default: this process's uid).
    // Socket-only, like `--exit-with-stdin`: clap does not enforce `requires` against the
    // present `--stdio` here (it parsed and ignored it), so `--stdio` is a named conflict too.
    #[arg(
        long,
        value_name = "UID",
        requires = "socket",
        conflicts_with = "stdio"
    )]
    pub allow_uid: Option<u32>,
    /// Exit once stdin ends after the secret line, removing the socket and, when then empty,
    /// its directory: the server that starts a `worker {user}` keeps its end open for as long
    /// as it lives, so the worker never outlives it (not even a `kill -9` of the server).
    #[arg(long, requires = "socket", conflicts_with = "stdio")]
    pub exit_with_stdin: bool,
}

/// Most threads of the worker's blocking pool (file work that cannot be done without waiting,
/// process set-up): a worker serves one gateway, whose calls are already bounded.
const WORKER_BLOCKING_THREADS: usize = 16;
/// How long an idle blocking thread is kept before it exits (its stack is given back).
const WORKER_BLOCKING_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(2);
/// glibc malloc arenas of the worker: one per thread by default (up to 8 per core), each
/// keeping its own freed pages resident; two bound that while the blocking threads rarely
/// contend.
const WORKER_MALLOC_ARENAS: i32 = 2;

/// Serves `handler` as `args` say; returns when the gateway closes stdio (or, for a socket,
/// when accepting fails). The runtime is a single-threaded one: a worker's calls are I/O (disk
/// waits go to the blocking pool), so one thread answers them without handing every frame
/// between threads, and the idle worker keeps fewer stacks and arenas resident. Freed heap is
/// returned to the kernel as the runtime parks (at most once a second).
pub fn run<H: Handler>(args: &WorkerArgs, handler: Arc<H>) -> Result<ExitCode> {
    codespace_runner_sandbox::limit_heap_arenas(WORKER_MALLOC_ARENAS);
    init_worker_logging();
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(WORKER_BLOCKING_THREADS)
        .thread_keep_alive(WORKER_BLOCKING_KEEP_ALIVE)
        .on_thread_park(codespace_engine::heap::release_free_heap_if_due)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(serve(args, handler))
}

/// The worker's log (stderr): `CODESPACE_LOG` filters as for every command; without it, warnings
/// and errors through a plain level filter, so an idle worker never builds (or keeps resident)
/// the directive parser and its pattern matchers.
fn init_worker_logging() {
    if std::env::var_os("CODESPACE_LOG").is_some() {
        crate::setup::init_logging();
        return;
    }
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_max_level(tracing::Level::WARN)
        .try_init();
}

/// `codespace worker`: serves the engine's standalone runner (sandboxed spawns through the
/// dedicated `codespace-sandbox-helper` beside this binary, else this same binary).
pub fn run_runner(args: &WorkerArgs) -> Result<ExitCode> {
    let exe = std::env::current_exe().ok().map(|exe| {
        let helper = codespace_runner_sandbox::choose_helper(&exe);
        if let Some(why) = &helper.fallback_reason {
            tracing::info!("sandbox helper: {why}; commands start through this binary instead");
        }
        helper.path
    });
    let handler = RunnerHandler {
        service: codespace_engine::worker_runner(exe),
    };
    run(args, Arc::new(handler))
}

/// This worker's identity in the handshake. A binary built with the `test-hooks` feature takes
/// its build id from `CODESPACE_TEST_WORKER_BUILD_ID` when set (tests of a worker of another
/// build); no other build reads the variable.
fn identity() -> Identity {
    let me = Identity::this_build();
    #[cfg(feature = "test-hooks")]
    if let Some(build) = std::env::var_os("CODESPACE_TEST_WORKER_BUILD_ID") {
        return Identity {
            build: build.to_string_lossy().into_owned(),
            ..me
        };
    }
    me
}

async fn serve<H: Handler>(args: &WorkerArgs, handler: Arc<H>) -> Result<ExitCode> {
    let me = identity();
    let input: Pin<Box<dyn AsyncRead + Send>> = match crate::stdio_pipes::stdin_pipe() {
        Some(p) => Box::pin(p),
        None => Box::pin(tokio::io::stdin()),
    };
    let mut input = BufReader::new(input);
    let secret = read_secret_line(&mut input)
        .await
        .map_err(|e| anyhow!("worker: {e}"))?;
    if let Some(path) = &args.socket {
        // With `--exit-with-stdin`, the end of stdin (its writer gone) ends the worker.
        let stdin_ends = async move {
            if args.exit_with_stdin {
                let _ = tokio::io::copy(&mut input, &mut tokio::io::sink()).await;
            } else {
                drop(input);
                std::future::pending::<()>().await;
            }
        };
        let uid = args
            .allow_uid
            .unwrap_or_else(|| rustix::process::geteuid().as_raw());
        let listener = codespace_runner_worker::unix::bind(path, uid)?;
        // One line once the socket accepts: whoever started the worker can connect now.
        let mut out = tokio::io::stdout();
        out.write_all(b"listening\n").await?;
        out.flush().await?;
        drop(out);
        tokio::select! {
            served = listener.serve_forever(handler, &secret, &me) => served?,
            () = stdin_ends => {
                tracing::info!("stdin ended: the worker's starter is gone, so is the worker");
            }
        }
        // The socket goes with the listener; the directory made for it goes when then empty.
        drop(listener);
        if args.exit_with_stdin
            && let Some(dir) = path.parent()
        {
            let _ = std::fs::remove_dir(dir);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let output: Pin<Box<dyn AsyncWrite + Send>> = match crate::stdio_pipes::stdout_pipe() {
        Some(p) => Box::pin(p),
        None => Box::pin(tokio::io::stdout()),
    };
    codespace_runner_worker::serve(input, output, handler, &secret, &me)
        .await
        .map_err(|e| anyhow!("worker: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

/// The calls the placeholder worker answers (the runner's `Call` replaces them).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PingCall {
    /// Answered with [`PingReply::Pong`].
    Ping,
    /// Never answered (tests kill the worker under it).
    #[cfg(feature = "test-hooks")]
    Hang,
}

/// Its answers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PingReply {
    /// The worker's pid.
    Pong {
        /// `getpid()` of the worker.
        pid: u32,
    },
}

/// The placeholder handler: answers `ping`, pushes no events.
#[derive(Debug, Default)]
pub struct PingHandler;

impl Handler for PingHandler {
    type Req = PingCall;
    type Resp = PingReply;
    type Ev = ();

    fn handle(&self, req: PingCall) -> BoxFuture<'_, PingReply> {
        Box::pin(async move {
            match req {
                PingCall::Ping => PingReply::Pong {
                    pid: std::process::id(),
                },
                #[cfg(feature = "test-hooks")]
                PingCall::Hang => std::future::pending().await,
            }
        })
    }
}

/// What the worker binary answers: a runner call, or a `ping` (the worker's pid). Told apart by
/// the frame's shape, without buffering the request: a runner call is a map (`{method, args}`),
/// a ping a bare name (`"ping"`); the call's payload (a patch's bytes) is read once, in place.
#[derive(Debug)]
pub enum WorkerRequest {
    /// A method of the runner (or `open_workspace`).
    Runner(Box<codespace_runner_api::Call>),
    /// `ping` (and the tests' `hang`).
    Ping(PingCall),
}

impl<'de> Deserialize<'de> for WorkerRequest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = WorkerRequest;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a runner call (a map) or a ping (a name)")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<WorkerRequest, E> {
                use serde::de::IntoDeserializer;
                PingCall::deserialize(v.into_deserializer()).map(WorkerRequest::Ping)
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<WorkerRequest, A::Error> {
                codespace_runner_api::Call::deserialize(
                    serde::de::value::MapAccessDeserializer::new(map),
                )
                .map(|c| WorkerRequest::Runner(Box::new(c)))
            }
        }
        d.deserialize_any(V)
    }
}

/// Its answers.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum WorkerResponse {
    /// A runner call's reply.
    Runner(Box<codespace_runner_api::Reply>),
    /// `pong`.
    Ping(PingReply),
}

/// The worker binary's handler: runner calls go to the engine's [`codespace_engine::WorkerService`].
#[derive(Debug)]
pub struct RunnerHandler {
    service: Arc<codespace_engine::WorkerService>,
}

impl Handler for RunnerHandler {
    type Req = WorkerRequest;
    type Resp = WorkerResponse;
    type Ev = codespace_runner_api::Event;

    fn handle(&self, req: WorkerRequest) -> BoxFuture<'_, WorkerResponse> {
        Box::pin(async move {
            match req {
                WorkerRequest::Runner(call) => {
                    #[cfg(feature = "test-hooks")]
                    if let codespace_runner_api::Call::Read(r) = call.as_ref()
                        && hang_here(&r.path)
                    {
                        std::future::pending::<()>().await;
                    }
                    #[cfg(feature = "test-hooks")]
                    if matches!(call.as_ref(), codespace_runner_api::Call::ProbeSandbox)
                        && std::env::var_os("CODESPACE_TEST_WORKER_NO_SANDBOX")
                            .is_some_and(|v| v == "1")
                    {
                        return WorkerResponse::Runner(Box::new(
                            codespace_runner_api::Reply::Probe(no_sandbox_probe()),
                        ));
                    }
                    WorkerResponse::Runner(Box::new(self.service.handle(*call).await))
                }
                WorkerRequest::Ping(p) => WorkerResponse::Ping(PingHandler.handle(p).await),
            }
        })
    }

    fn attach(&self, events: codespace_runner_worker::EventSender<codespace_runner_api::Event>) {
        self.service.attach(events);
    }
}

/// Test hook (`test-hooks` builds only): with `CODESPACE_TEST_WORKER_NO_SANDBOX=1` the worker
/// answers `probe_sandbox` as a kernel without Landlock, seccomp, namespaces or a writable
/// `pids` cgroup would (an environment that cannot hold the command sandbox, e.g. a container
/// runtime that filters those syscalls), so a test sees what the gateway reports and refuses
/// there.
#[cfg(feature = "test-hooks")]
fn no_sandbox_probe() -> codespace_runner_api::SandboxProbe {
    codespace_runner_api::SandboxProbe {
        landlock_abi: None,
        seccomp: false,
        user_namespaces: false,
        net_namespaces: false,
        mount_namespaces: false,
        // A limit no host runner picks, so a test tells the worker's report from the host's.
        pids: Some(codespace_runner_api::PidsProbe {
            limit: 7,
            mechanism: codespace_runner_api::PidsEnforcement::None,
        }),
    }
}

/// Test hook (`test-hooks` builds only): a `read` of the path in `CODESPACE_TEST_WORKER_HANG_ON`
/// never answers; first the worker writes its pid to the FIFO (or file) named by
/// `CODESPACE_TEST_WORKER_HANG_MARK`, so a test knows the call reached it.
#[cfg(feature = "test-hooks")]
fn hang_here(path: &str) -> bool {
    let hit = std::env::var_os("CODESPACE_TEST_WORKER_HANG_ON").is_some_and(|p| p == path);
    if hit && let Some(mark) = std::env::var_os("CODESPACE_TEST_WORKER_HANG_MARK") {
        let _ = std::fs::write(mark, format!("{}\n", std::process::id()));
    }
    hit
}
