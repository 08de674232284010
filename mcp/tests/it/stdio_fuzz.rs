//! Generated-input robustness of `codespace serve` over stdio: after a proper initialize, 3 000
//! deterministic (xorshift, fixed seed) hostile lines — truncated requests, byte garbage, JSON of the
//! wrong shape, wrongly typed ids/methods/params, tools/call with random names and mutated arguments,
//! unknown notifications — must never stop the server from answering a `ping` and a `read` (checked
//! every 100 lines); every request with a valid envelope (version, integer id, string method) must get
//! a response carrying its id, whatever its params; stdout must only ever carry JSON-RPC lines; nothing
//! may panic; and stdin EOF must end the server with exit 0.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::stdio_common;

use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use stdio_common::{StdioServer, jsonrpc_message};

const SEED: u64 = 0x5EED_F00D_2545_F491;
const LINES: usize = 3_000;
const CHECK_EVERY: usize = 100;
/// Bound on waiting for one check's answers (and for the initialize answer).
const CHECK_DEADLINE: Duration = Duration::from_secs(10);
/// Ids at or above this are the test's own checks; generated integer ids stay below it.
const CHECK_ID_BASE: i64 = 1_000_000_000;
/// Requests with a valid envelope get an id at or above this (unique per line) so that their answers can
/// be counted; generated random integer ids stay below it.
const TRACKED_ID_BASE: i64 = 500_000_000;
/// Size of the "huge string" values.
const HUGE: usize = 200 * 1024;
/// Nesting depth of the deeply nested values.
const DEEP: usize = 1_000;

/// The tools the server serves (the engine's table: a new tool gets fuzzed too).
const TOOLS: &[codespace_engine::ToolSpec] = codespace_engine::TOOLS;

const METHODS: [&str; 14] = [
    "ping",
    "initialize",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "logging/setLevel",
    "completion/complete",
    "notifications/cancelled",
    "notifications/initialized",
    "no/such/method",
    "",
];

/// xorshift64*: tiny and deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    /// A string value. Random ones always start with `fz` so that, used as an argv, they never name a
    /// real program.
    fn string(&mut self) -> String {
        const POOL: [&str; 14] = [
            "",
            "a.txt",
            "../../etc/passwd",
            "/etc/passwd",
            "default",
            "no-such-workspace",
            "proc-00000000",
            "op-00000000",
            "absent",
            "sha256:00",
            "é\u{2024}\u{2024}",
            "\u{0}",
            "%2e%2e/x",
            "**/*",
        ];
        match self.below(4) {
            0 => POOL[self.below(POOL.len())].to_owned(),
            1 if self.one_in(25) => "h".repeat(HUGE),
            _ => {
                let n = self.below(12);
                let mut s = String::from("fz");
                for _ in 0..n {
                    let c = char::from_u32((self.next() % 0x2_0000) as u32).unwrap_or('\u{FFFD}');
                    s.push(c);
                }
                s
            }
        }
    }

    fn int(&mut self) -> Value {
        match self.below(6) {
            0 => json!(0),
            1 => json!(-1),
            2 => json!(u64::MAX),
            3 => json!(i64::MIN),
            4 => json!(1.5),
            _ => json!(self.below(1_000)),
        }
    }

    /// A random JSON value, at most `depth` levels deep.
    fn value(&mut self, depth: usize) -> Value {
        let top = if depth == 0 { 5 } else { 7 };
        match self.below(top) {
            0 => Value::Null,
            1 => json!(self.one_in(2)),
            2 => self.int(),
            3 | 4 => json!(self.string()),
            5 => {
                let n = self.below(4);
                Value::Array((0..n).map(|_| self.value(depth - 1)).collect())
            }
            _ => {
                let n = self.below(4);
                let mut m = Map::new();
                for _ in 0..n {
                    let k = self.string();
                    let v = self.value(depth - 1);
                    m.insert(k, v);
                }
                Value::Object(m)
            }
        }
    }

    /// An id of any type; integer ids stay below [`CHECK_ID_BASE`].
    fn id(&mut self) -> Value {
        match self.below(5) {
            0 | 1 => json!(2 + self.below(100_000)),
            2 => json!(self.string()),
            _ => self.value(1),
        }
    }
}

/// A valid argument object for `tool` (before mutation).
fn template(tool: &str, i: usize) -> Value {
    match tool {
        "workspace_info" => json!({"workspace_id": "default"}),
        "read" => json!({"workspace_id": "default", "path": "a.txt", "offset": 0, "limit": 100}),
        "find" => json!({"workspace_id": "default", "glob": "**/*.txt"}),
        "apply_patch" => json!({
            "workspace_id": "default",
            "patch": format!("*** Begin Patch\n*** Add File: fuzz-{i}.txt\n+hi\n*** End Patch\n"),
            "check_only": true,
        }),
        "operation_status" => json!({"operation_id": "op-00000000"}),
        "exec_command" => json!({"workspace_id": "default", "command": ["true"], "yield_ms": 50}),
        "write_stdin" => json!({"process_id": "proc-00000000", "data": "hi\n"}),
        "read_process" => json!({"process_id": "proc-00000000", "cursor": 0, "wait_ms": 10}),
        "process_resize" => json!({"process_id": "proc-00000000", "rows": 24, "cols": 80}),
        _ => json!({"process_id": "proc-00000000"}),
    }
}

/// Mutates an argument object: drop, add, retype or null fields (1 to 3 times).
fn mutate(rng: &mut Rng, args: &mut Map<String, Value>) {
    for _ in 0..1 + rng.below(3) {
        let keys: Vec<String> = args.keys().cloned().collect();
        let key = if keys.is_empty() || rng.one_in(4) {
            rng.string()
        } else {
            keys[rng.below(keys.len())].clone()
        };
        match rng.below(4) {
            0 => {
                args.remove(&key);
            }
            1 => {
                args.insert(key, Value::Null);
            }
            _ => {
                let v = rng.value(2);
                args.insert(key, v);
            }
        }
    }
}

fn deep_array() -> String {
    format!("{}{}", "[".repeat(DEEP), "]".repeat(DEEP))
}

fn deep_object() -> String {
    format!("{}1{}", "{\"a\":".repeat(DEEP), "}".repeat(DEEP))
}

/// A well-formed request used as raw material for truncations.
fn valid_request(rng: &mut Rng, i: usize) -> String {
    let tool = TOOLS[rng.below(TOOLS.len())].name.as_str();
    json!({
        "jsonrpc": "2.0", "id": 2 + rng.below(100_000), "method": "tools/call",
        "params": {"name": tool, "arguments": template(tool, i)}
    })
    .to_string()
}

/// The kinds of generated lines (for the report).
const KINDS: [&str; 7] = [
    "truncated request",
    "byte garbage",
    "wrong-shape JSON",
    "wrongly typed request",
    "tools/call mutated",
    "unknown notification",
    "deep nesting",
];

/// One generated line (without the newline; never contains `\n`), its kind, and the id of a request that
/// must be answered with that id (lines with a valid envelope: version, integer id, string method).
fn generate(rng: &mut Rng, i: usize) -> (Vec<u8>, &'static str, Option<i64>) {
    let mut tracked = None;
    let kind = rng.below(KINDS.len());
    let line: Vec<u8> = match kind {
        0 => {
            let full = valid_request(rng, i).into_bytes();
            let cut = rng.below(full.len());
            full[..cut].to_vec()
        }
        1 => {
            let n = rng.below(300);
            if rng.one_in(2) {
                // Arbitrary bytes (usually not UTF-8), but no newline.
                (0..n)
                    .map(|_| (rng.next() >> 56) as u8)
                    .map(|b| if b == b'\n' { b' ' } else { b })
                    .collect()
            } else {
                let s: String = (0..n)
                    .map(|_| char::from_u32((rng.next() % 0x11_0000) as u32).unwrap_or('{'))
                    .map(|c| if c == '\n' { ' ' } else { c })
                    .collect();
                s.into_bytes()
            }
        }
        2 => {
            let v = match rng.below(6) {
                0 => Value::Array((0..rng.below(5)).map(|_| rng.value(3)).collect()),
                1 => rng.int(),
                2 => json!("s".repeat(HUGE)),
                3 => {
                    json!({"jsonrpc": "2.0", "id": rng.id(), "method": "ping", "params": "x".repeat(HUGE)})
                }
                4 => json!({"nested": {"deeper": rng.value(4)}, "jsonrpc": "2.0"}),
                _ => rng.value(3),
            };
            v.to_string().into_bytes()
        }
        3 => {
            let mut m = Map::new();
            if !rng.one_in(5) {
                let jsonrpc = if rng.one_in(4) {
                    rng.value(1)
                } else {
                    json!("2.0")
                };
                m.insert("jsonrpc".into(), jsonrpc);
            }
            if !rng.one_in(4) {
                let id = if rng.one_in(2) {
                    rng.id()
                } else {
                    json!(TRACKED_ID_BASE + i as i64)
                };
                m.insert("id".into(), id);
            }
            if !rng.one_in(5) {
                let method = if rng.one_in(3) {
                    rng.value(1)
                } else {
                    json!(METHODS[rng.below(METHODS.len())])
                };
                m.insert("method".into(), method);
            }
            if !rng.one_in(3) {
                m.insert("params".into(), rng.value(3));
            }
            if rng.one_in(6) {
                m.insert("result".into(), rng.value(2));
            }
            // A request (valid envelope: version, integer id, string method) must be answered by id.
            if m.get("jsonrpc") == Some(&json!("2.0"))
                && m.get("method").is_some_and(Value::is_string)
                && m.get("id") == Some(&json!(TRACKED_ID_BASE + i as i64))
            {
                tracked = Some(TRACKED_ID_BASE + i as i64);
            }
            Value::Object(m).to_string().into_bytes()
        }
        4 => {
            let name = if rng.one_in(4) {
                json!(rng.string())
            } else {
                json!(TOOLS[rng.below(TOOLS.len())].name.as_str())
            };
            let tool = name.as_str().unwrap_or("read").to_owned();
            let mut args = match template(&tool, i) {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            mutate(rng, &mut args);
            let arguments = match rng.below(8) {
                0 => rng.value(2),
                1 => Value::Null,
                _ => Value::Object(args),
            };
            let mut params = json!({"name": name, "arguments": arguments});
            if rng.one_in(6) {
                params["_meta"] = rng.value(2);
            }
            if rng.one_in(8) {
                params["name"] = rng.value(1);
            }
            let id = if rng.one_in(4) {
                rng.id()
            } else {
                let id = TRACKED_ID_BASE + i as i64;
                tracked = Some(id);
                json!(id)
            };
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
                .to_string()
                .into_bytes()
        }
        5 => {
            let method = match rng.below(3) {
                0 => format!("notifications/{}", rng.string()),
                1 => rng.string(),
                _ => "notifications/cancelled".to_owned(),
            };
            let params = if method == "notifications/cancelled" {
                json!({"requestId": rng.id(), "reason": rng.value(1)})
            } else {
                rng.value(2)
            };
            json!({"jsonrpc": "2.0", "method": method, "params": params})
                .to_string()
                .into_bytes()
        }
        _ => {
            let id = 2 + rng.below(100_000);
            match rng.below(4) {
                0 => deep_array(),
                1 => deep_object(),
                2 => format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"read","arguments":{}}}}}"#,
                    deep_object()
                ),
                _ => format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"ping","params":{}}}"#,
                    deep_array()
                ),
            }
            .into_bytes()
        }
    };
    (line, KINDS[kind], tracked)
}

/// What came out on stdout, line by line.
#[derive(Default)]
struct Tally {
    /// Every stdout line that was not a JSON-RPC message.
    bad_lines: Vec<String>,
    stdout_lines: usize,
    /// JSON-RPC error codes seen on stdout, and how many results.
    outcomes: BTreeMap<String, usize>,
    /// Integer ids of every response seen.
    answered: BTreeSet<i64>,
}

impl Tally {
    fn of(transcript: &[Vec<u8>]) -> Tally {
        let mut t = Tally::default();
        for raw in transcript {
            t.stdout_lines += 1;
            let Some(v) = jsonrpc_message(raw) else {
                let shown = String::from_utf8_lossy(&raw[..raw.len().min(300)]).into_owned();
                t.bad_lines.push(shown);
                continue;
            };
            let key = match (v.get("result"), v["error"]["code"].as_i64()) {
                (Some(r), _) if r["isError"] == true => "result isError".to_owned(),
                (Some(_), _) => "result".to_owned(),
                (None, Some(code)) => format!("error {code}"),
                (None, None) => "other message".to_owned(),
            };
            *t.outcomes.entry(key).or_default() += 1;
            if let Some(id) = v.get("id").and_then(Value::as_i64) {
                t.answered.insert(id);
            }
        }
        t
    }
}

/// Writes one line; a server that stopped reading fails the test with `what` was being sent.
fn send_line(s: &mut StdioServer, line: &[u8], what: &str) {
    if let Err(e) = s.try_send_bytes(line) {
        let status = s.try_status();
        panic!(
            "server stopped reading stdin ({e}) at {what}; status {status:?}; stderr tail:\n{}",
            s.stderr_tail()
        );
    }
}

fn initialize(s: &mut StdioServer) {
    let r = s.initialize("fuzz-test");
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{r}");
}

/// A valid ping and a valid read of `a.txt` are both answered correctly.
fn check(s: &mut StdioServer, k: i64, context: &str) {
    let ping = CHECK_ID_BASE + 2 * k;
    let read = ping + 1;
    send_line(
        s,
        json!({"jsonrpc": "2.0", "id": ping, "method": "ping"})
            .to_string()
            .as_bytes(),
        context,
    );
    send_line(
        s,
        json!({
            "jsonrpc": "2.0", "id": read, "method": "tools/call",
            "params": {"name": "read", "arguments": {"workspace_id": "default", "path": "a.txt"}}
        })
        .to_string()
        .as_bytes(),
        context,
    );
    let got = s.responses(&[ping, read], context);
    let p = &got[&ping];
    assert!(
        p.get("error").is_none() && p["result"].is_object(),
        "ping ({context}): {p}"
    );
    let r = &got[&read];
    assert_eq!(r["result"]["isError"], false, "read ({context}): {r}");
    assert_eq!(
        r["result"]["structuredContent"]["content"], "alpha\n",
        "read ({context}): {r}"
    );
    assert_eq!(r["result"]["structuredContent"]["path"], "a.txt");
}

#[test]
fn generated_garbage_never_stops_the_stdio_server() {
    let started = Instant::now();
    let mut s = StdioServer::serve_temp_workspace()
        .deadline(CHECK_DEADLINE)
        .allow_non_json_stdout()
        .spawn();
    initialize(&mut s);
    check(&mut s, 0, "after initialize");

    let mut rng = Rng(SEED);
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    let mut bytes_sent: usize = 0;
    let mut tracked = Vec::new();
    for i in 0..LINES {
        let (line, kind, must_answer) = generate(&mut rng, i);
        if let Some(id) = must_answer {
            let shown = String::from_utf8_lossy(&line[..line.len().min(400)]).into_owned();
            tracked.push((id, shown));
        }
        debug_assert!(!line.contains(&b'\n'));
        *kinds.entry(kind).or_default() += 1;
        bytes_sent += line.len() + 1;
        send_line(&mut s, &line, &format!("line {i} ({kind})"));
        if (i + 1) % CHECK_EVERY == 0 {
            let k = ((i + 1) / CHECK_EVERY) as i64;
            check(&mut s, k, &format!("after line {i} ({kind})"));
        } else {
            s.collect_available();
        }
    }

    let alive = s.try_status();
    assert!(alive.is_none(), "server exited during the run: {alive:?}");
    let status = s.close_and_wait(Duration::from_secs(10));
    // Whatever was still in flight arrives before stdout closes.
    s.read_to_eof(Duration::from_secs(5));
    let elapsed = started.elapsed();
    let tally = Tally::of(s.transcript());

    let unanswered: Vec<&(i64, String)> = tracked
        .iter()
        .filter(|(id, _)| !tally.answered.contains(id))
        .collect();
    eprintln!(
        "stdio_fuzz: seed {SEED:#x}, {LINES} generated lines ({bytes_sent} bytes), {} checks passed, \
         {} stdout lines, {} of {} id-tracked requests answered, exit code {:?}, {elapsed:?}",
        LINES / CHECK_EVERY + 1,
        tally.stdout_lines,
        tracked.len() - unanswered.len(),
        tracked.len(),
        status.code()
    );
    for (kind, n) in &kinds {
        eprintln!("  sent {kind:<22} {n}");
    }
    for (outcome, n) in &tally.outcomes {
        eprintln!("  got  {outcome:<22} {n}");
    }

    // Every property is checked; all failures are reported together.
    let mut failures = Vec::new();
    if !tally.bad_lines.is_empty() {
        failures.push(format!(
            "{} stdout lines were not JSON-RPC messages, first: {:?}",
            tally.bad_lines.len(),
            tally.bad_lines.iter().take(5).collect::<Vec<_>>()
        ));
    }
    if !unanswered.is_empty() {
        failures.push(format!(
            "{} of {} requests with a valid envelope (\"jsonrpc\":\"2.0\", integer id, string method) \
             never got a response carrying their id; first ones:\n{:#?}",
            unanswered.len(),
            tracked.len(),
            unanswered.iter().take(12).collect::<Vec<_>>()
        ));
    }
    if s.stderr_text().contains("panicked") {
        failures.push(format!("the server logged a panic:\n{}", s.stderr_tail()));
    }
    if status.code() != Some(0) {
        failures.push(format!(
            "exit status {status} after stdin EOF; stderr tail:\n{}",
            s.stderr_tail()
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
