//! Shared harness of the stdio tests: the real `codespace` binary spawned with `serve ...`, raw
//! JSON-RPC lines written to its stdin, every stdout line kept in a transcript, replies matched by
//! id within a deadline, tool results decoded, and bounded waits for the exit.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_codespace");
/// The MCP protocol version the tests negotiate.
pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// How long a reply may take unless the builder says otherwise.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);

enum StderrTo {
    Null,
    Inherit,
    File(PathBuf),
}

/// How to start the server: arguments after `serve`, environment, working directory, where its
/// stderr goes, the reply deadline and whether stdout may carry non-JSON lines.
pub struct StdioBuilder {
    program: Option<PathBuf>,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
    stderr: StderrTo,
    deadline: Duration,
    strict: bool,
    dir: Option<tempfile::TempDir>,
}

impl StdioBuilder {
    /// Runs this executable instead of [`BIN`] (a copy of it elsewhere).
    pub fn program(mut self, program: impl Into<PathBuf>) -> Self {
        self.program = Some(program.into());
        self
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.envs
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    pub fn cwd(mut self, dir: impl AsRef<Path>) -> Self {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// The server's stderr goes to the test's stderr (the default discards it).
    pub fn stderr_inherit(mut self) -> Self {
        self.stderr = StderrTo::Inherit;
        self
    }

    /// The server's stderr goes to `path` (created at spawn); see [`StdioServer::stderr_tail`].
    pub fn stderr_file(mut self, path: impl AsRef<Path>) -> Self {
        self.stderr = StderrTo::File(path.as_ref().to_owned());
        self
    }

    /// How long [`StdioServer::response`] and [`StdioServer::responses`] wait.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Non-JSON stdout lines are only recorded in the transcript (the default panics on them).
    pub fn allow_non_json_stdout(mut self) -> Self {
        self.strict = false;
        self
    }

    pub fn spawn(self) -> StdioServer {
        let mut cmd = Command::new(self.program.as_deref().unwrap_or(Path::new(BIN)));
        cmd.arg("serve")
            .args(&self.args)
            .env_remove("CODESPACE_CONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        if let Some(cwd) = &self.cwd {
            cmd.current_dir(cwd);
        }
        let stderr_log = match self.stderr {
            StderrTo::Null => {
                cmd.stderr(Stdio::null());
                None
            }
            StderrTo::Inherit => {
                cmd.stderr(Stdio::inherit());
                None
            }
            StderrTo::File(path) => {
                cmd.stderr(Stdio::from(std::fs::File::create(&path).unwrap()));
                Some(path)
            }
        };
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        StdioServer {
            child,
            stdin,
            lines: rx,
            transcript: Vec::new(),
            next_id: 1,
            deadline: self.deadline,
            strict: self.strict,
            stderr_log,
            dir: self.dir,
        }
    }
}

/// A running `codespace serve` on piped stdio. Dropping it kills the process if still running.
pub struct StdioServer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Vec<u8>>,
    transcript: Vec<Vec<u8>>,
    next_id: i64,
    deadline: Duration,
    strict: bool,
    stderr_log: Option<PathBuf>,
    dir: Option<tempfile::TempDir>,
}

impl StdioServer {
    /// `codespace serve` plus whatever the builder adds.
    pub fn serve() -> StdioBuilder {
        StdioBuilder {
            program: None,
            args: Vec::new(),
            envs: Vec::new(),
            cwd: None,
            stderr: StderrTo::Null,
            deadline: DEFAULT_DEADLINE,
            strict: true,
            dir: None,
        }
    }

    /// `codespace serve <tmp>/ws --store <tmp>/store.db` in `<tmp>`, with `ws/a.txt` = `alpha\n`
    /// and stderr in `<tmp>/stderr.log`; the server owns the temp dir.
    pub fn serve_temp_workspace() -> StdioBuilder {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(ws.join("a.txt"), "alpha\n").unwrap();
        let mut b = StdioServer::serve()
            .arg(&ws)
            .arg("--store")
            .arg(dir.path().join("store.db"))
            .cwd(dir.path())
            .stderr_file(dir.path().join("stderr.log"));
        b.dir = Some(dir);
        b
    }

    /// The temp dir of [`StdioServer::serve_temp_workspace`].
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("no temp dir").path()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status when the server has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Writes `line` and a newline to stdin.
    pub fn try_send_bytes(&mut self, line: &[u8]) -> std::io::Result<()> {
        let stdin = self.stdin.as_mut().expect("stdin already closed");
        stdin.write_all(line)?;
        stdin.write_all(b"\n")?;
        stdin.flush()
    }

    pub fn send_bytes(&mut self, line: &[u8]) {
        if let Err(e) = self.try_send_bytes(line) {
            let status = self.child.try_wait();
            panic!(
                "server stopped reading stdin ({e}); status {status:?}; stderr tail:\n{}",
                self.stderr_tail()
            );
        }
    }

    pub fn send(&mut self, v: &Value) {
        self.send_bytes(v.to_string().as_bytes());
    }

    /// Sends a request with the next id and returns that id without waiting.
    pub fn send_request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Sends a request and returns the whole reply (`result` or `error`).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.response(id)
    }

    /// `initialize` as `client`, then `notifications/initialized`; returns the initialize reply.
    pub fn initialize(&mut self, client: &str) -> Value {
        let r = self.request(
            "initialize",
            json!({"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                   "clientInfo": {"name": client, "version": "0"}}),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r
    }

    /// `tools/call`: the reply's `result` (null when the reply is a JSON-RPC error).
    pub fn call(&mut self, name: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": args}))["result"].clone()
    }

    /// `tools/call` decoded: the structured result, or the ErrorBody of a tool error.
    pub fn tool(&mut self, name: &str, args: Value) -> Result<Value, Value> {
        let r = self.call(name, args);
        if r["isError"] == true {
            Err(error_body(&r))
        } else {
            assert_eq!(r["isError"], false, "{name}: not a tool result: {r}");
            Ok(r["structuredContent"].clone())
        }
    }

    /// The structured result of a call that must succeed.
    pub fn tool_ok(&mut self, name: &str, args: Value) -> Value {
        self.tool(name, args)
            .unwrap_or_else(|e| panic!("{name} failed: {e}"))
    }

    /// The ErrorBody of a call that must fail.
    pub fn tool_err(&mut self, name: &str, args: Value) -> Value {
        match self.tool(name, args) {
            Ok(v) => panic!("{name} succeeded: {v}"),
            Err(e) => e,
        }
    }

    /// Waits (up to the deadline) for the reply carrying `id`.
    pub fn response(&mut self, id: i64) -> Value {
        let mut got = self.responses(&[id], &format!("request {id}"));
        got.remove(&id).unwrap()
    }

    /// Waits (up to the deadline) until a reply carrying each of `ids` has arrived; every line
    /// read meanwhile goes to the transcript. `context` only enriches failure messages.
    pub fn responses(&mut self, ids: &[i64], context: &str) -> BTreeMap<i64, Value> {
        let end = Instant::now() + self.deadline;
        let mut found = BTreeMap::new();
        while found.len() < ids.len() {
            let left = end.saturating_duration_since(Instant::now());
            let raw = match self.lines.recv_timeout(left) {
                Ok(raw) => raw,
                Err(RecvTimeoutError::Timeout) => panic!(
                    "no answer to ids {ids:?} within {:?} ({context}); got {found:?}; {}",
                    self.deadline,
                    self.diagnostics()
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "server closed stdout before answering {ids:?} ({context}); status {:?}; {}",
                    self.child.try_wait(),
                    self.diagnostics()
                ),
            };
            let parsed = std::str::from_utf8(&raw)
                .map_err(|e| e.to_string())
                .and_then(|s| serde_json::from_str::<Value>(s).map_err(|e| e.to_string()));
            match parsed {
                Ok(v) => {
                    if let Some(id) = v.get("id").and_then(Value::as_i64)
                        && ids.contains(&id)
                    {
                        found.insert(id, v);
                    }
                }
                Err(e) if self.strict => panic!(
                    "stdout line is not JSON ({e}): {}",
                    String::from_utf8_lossy(&raw)
                ),
                Err(_) => {}
            }
            self.transcript.push(raw);
        }
        found
    }

    /// The next stdout line as JSON (waiting up to the deadline); it also goes to the transcript.
    pub fn next_message(&mut self) -> Value {
        let raw = self
            .lines
            .recv_timeout(self.deadline)
            .unwrap_or_else(|e| panic!("no stdout line within {:?}: {e}", self.deadline));
        self.transcript.push(raw.clone());
        serde_json::from_slice(&raw)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&raw)))
    }

    /// Moves every stdout line already available into the transcript.
    pub fn collect_available(&mut self) {
        while let Ok(raw) = self.lines.try_recv() {
            self.transcript.push(raw);
        }
    }

    /// Moves stdout lines into the transcript until stdout closes or `within` has passed.
    pub fn read_to_eof(&mut self, within: Duration) {
        let end = Instant::now() + within;
        while let Ok(raw) = self
            .lines
            .recv_timeout(end.saturating_duration_since(Instant::now()))
        {
            self.transcript.push(raw);
        }
    }

    /// Every stdout line read so far (without its newline).
    pub fn transcript(&self) -> &[Vec<u8>] {
        &self.transcript
    }

    /// The transcript lines that are not JSON-RPC messages (lossy, at most 300 bytes each).
    pub fn non_jsonrpc_lines(&self) -> Vec<String> {
        self.transcript
            .iter()
            .filter(|raw| jsonrpc_message(raw).is_none())
            .map(|raw| String::from_utf8_lossy(&raw[..raw.len().min(300)]).into_owned())
            .collect()
    }

    /// The whole stderr log (empty unless the builder sent stderr to a file).
    pub fn stderr_text(&self) -> String {
        self.stderr_log
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    /// The last 2 000 bytes or so of the stderr log.
    pub fn stderr_tail(&self) -> String {
        let log = self.stderr_text();
        let start = log.len().saturating_sub(2_000);
        let start = (start..log.len())
            .find(|i| log.is_char_boundary(*i))
            .unwrap_or(log.len());
        log[start..].to_owned()
    }

    fn diagnostics(&self) -> String {
        let skip = self.transcript.len().saturating_sub(10);
        let last: Vec<String> = self.transcript[skip..]
            .iter()
            .map(|raw| String::from_utf8_lossy(&raw[..raw.len().min(300)]).into_owned())
            .collect();
        format!(
            "last stdout lines: {last:?}; stderr tail:\n{}",
            self.stderr_tail()
        )
    }

    /// Closes stdin (EOF for the server).
    pub fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    /// Waits (bounded polling) for the exit status; past `within` kills the server and panics.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let end = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() >= end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "server did not exit within {within:?}; stderr tail:\n{}",
                    self.stderr_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Closes stdin and waits (bounded) for the exit status.
    pub fn close_and_wait(&mut self, within: Duration) -> ExitStatus {
        self.close_stdin();
        self.wait_exit(within)
    }

    /// SIGKILL, then reaps the process.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A stdout line parsed, when it is a JSON-RPC message (an object with `"jsonrpc": "2.0"`).
pub fn jsonrpc_message(raw: &[u8]) -> Option<Value> {
    std::str::from_utf8(raw)
        .ok()
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .filter(|v| v.is_object() && v["jsonrpc"] == "2.0")
}

/// The ErrorBody carried as JSON text by a failed tool result.
pub fn error_body(result: &Value) -> Value {
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("tool error without text content: {result}"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("ErrorBody is not JSON ({e}): {text}"))
}

/// True when the binary under test reads the env-driven test hooks (built with the `test-hooks`
/// feature, as scripts/test.sh does); otherwise skips (`codespace_test_skip`).
pub fn test_hooks_or_skip(test: &str) -> bool {
    codespace_test_skip::require(
        cfg!(feature = "test-hooks"),
        test,
        "the binary was built without the test-hooks feature \
         (scripts/test.sh enables it: --features codespace-mcp/test-hooks)",
    )
}
