//! What a person sees of a held call before deciding on it: the redacted one-line summary (a
//! command line cut with a marker, or a patch's files with their +/- counts) and the details of a
//! held command (cwd, tty, background, `env` entries through the redactor).

use crate::config::Config;
use crate::request::command_facts;
use crate::wire::ToolCall;
use serde_json::Value;

/// How many characters of a command line a summary keeps (then a `… [cut: N more chars]`
/// marker; `codespace approvals show` prints the whole line).
pub const SUMMARY_LINE_CHARS: usize = 500;

/// A short, redacted summary a human decides on: the command line (cut at
/// [`SUMMARY_LINE_CHARS`], with a marker), or the files a patch touches with their +/- line
/// counts. Control characters are kept; printers escape them ([`crate::shown::escape`]).
pub fn summary(config: &Config, workspace: &str, args: &ToolCall) -> String {
    match args {
        ToolCall::ExecCommand(p) => {
            let facts = command_facts(&p.command, p.tty.unwrap_or(false));
            let line = config
                .redaction
                .text(facts.get("line").and_then(Value::as_str).unwrap_or(""))
                .into_owned();
            let line = crate::shown::cut(&line, SUMMARY_LINE_CHARS);
            format!("exec_command in {workspace}: {line}")
        }
        ToolCall::ApplyPatch(p) => config
            .redaction
            .text(&format!(
                "apply_patch in {workspace}: {}",
                patch_summary(&p.patch)
            ))
            .into_owned(),
        ToolCall::WriteFile(p) => config
            .redaction
            .text(&format!(
                "write_file in {workspace}: {} {} ({} bytes)",
                p.mode.as_str(),
                p.path,
                p.bytes().map_or(0, |b| b.len())
            ))
            .into_owned(),
        other => format!("{} in {workspace}", other.tool()),
    }
}

/// What a person sees of a held command beside its summary, as `(label, text)` pairs, redacted
/// but not yet escaped: its working directory, `tty`, `background`, and every `env` entry as
/// `NAME=value` with the value through the redactor. Empty for a patch.
pub fn held_details(config: &Config, tool: &str, args: &Value) -> Vec<(String, String)> {
    let Ok(ToolCall::ExecCommand(p)) = ToolCall::parse(tool, args) else {
        return Vec::new();
    };
    let mut out = vec![
        (
            "cwd".to_string(),
            config
                .redaction
                .text(p.cwd.as_deref().unwrap_or("."))
                .into_owned(),
        ),
        ("tty".to_string(), p.tty.unwrap_or(false).to_string()),
        (
            "background".to_string(),
            p.background.unwrap_or(false).to_string(),
        ),
    ];
    for (name, value) in p.env.iter().flatten() {
        out.push(("env".to_string(), env_entry(config, name, value)));
    }
    out
}

/// `NAME=value` of a held `env` entry, the value through the redactor (with the name beside
/// it, so `DB_PASSWORD=…`-style rules apply).
pub fn env_entry(config: &Config, name: &str, value: &str) -> String {
    config
        .redaction
        .text(&format!("{name}={value}"))
        .into_owned()
}

/// `update src/a.rs (+3 -1), add b.txt (+2 -0)` from a V4A patch's text.
fn patch_summary(patch: &str) -> String {
    let mut files: Vec<(String, String, u64, u64)> = Vec::new();
    for line in patch.lines() {
        let header = [
            ("*** Add File: ", "add"),
            ("*** Update File: ", "update"),
            ("*** Delete File: ", "delete"),
        ]
        .iter()
        .find_map(|(p, k)| line.strip_prefix(p).map(|rest| (*k, rest.trim())));
        if let Some((kind, path)) = header {
            files.push((kind.to_string(), path.to_string(), 0, 0));
        } else if let Some(to) = line.strip_prefix("*** Move to: ") {
            if let Some(last) = files.last_mut() {
                last.0 = "move".into();
                last.1 = format!("{} -> {}", last.1, to.trim());
            }
        } else if line.starts_with("***") {
            continue;
        } else if let Some(last) = files.last_mut() {
            if line.starts_with('+') {
                last.2 += 1;
            } else if line.starts_with('-') {
                last.3 += 1;
            }
        }
    }
    if files.is_empty() {
        return "(no files)".into();
    }
    files
        .iter()
        .map(|(k, p, a, d)| format!("{k} {p} (+{a} -{d})"))
        .collect::<Vec<_>>()
        .join(", ")
}
