//! The `context.command` record of an argv: the program, its prefixes, whether a shell runs it
//! (`sh -c …`) and its display line; `crate::request` re-exports it.

use serde_json::{Value, json};

/// The shells whose `-c` makes a command `via_shell`.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "fish", "busybox"];

/// Quotes one argv word for display.
fn shell_quote(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// The `context.command` record of an argv.
pub fn command_facts(argv: &[String], tty: bool) -> Value {
    let program = argv
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
        .unwrap_or_default();
    let line = argv
        .iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ");
    let mut words: Vec<String> = Vec::new();
    words.push(program.clone());
    words.extend(argv.iter().skip(1).take(2).cloned());
    let prefixes: Vec<String> = (1..=words.len())
        .map(|n| words.iter().take(n).cloned().collect::<Vec<_>>().join(" "))
        .collect();
    let via_shell = SHELLS.contains(&program.as_str())
        && argv
            .iter()
            .skip(1)
            .any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('c'));
    json!({
        "program": program,
        "line": line,
        "prefixes": prefixes,
        "via_shell": via_shell,
        "tty": tty,
        "env_names": [],
        "background": false,
    })
}
