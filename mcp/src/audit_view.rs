//! How `codespace audit` shows decision rows: the table, the JSON-lines export a SIEM reads
//! as-is (stable field names, documented in docs/policy.md), and the collapsing of default-deny
//! sandbox-capability rows into the row of their call (they stay stored, for replay). Every text
//! a row prints has its control characters escaped ([`codespace_engine::shown`]) and a cut
//! subject says how much it left out.

use codespace_engine::shown::escape;
use codespace_store::DecisionRow;
use serde_json::{Value, json};

/// One row as shown, with the capability rows folded into it.
#[derive(Debug, Clone)]
pub struct ShownRow {
    /// The stored row.
    pub row: DecisionRow,
    /// Sandbox capabilities of the same call that no policy permitted (collapsed rows).
    pub collapsed: Vec<String>,
}

/// The sandbox-capability actions (requests that shape the sandbox instead of gating the call).
const CAPABILITIES: &[&str] = &["process_write", "process_network"];

/// True for a sandbox-capability sub-request (from its recorded request, else its action).
pub fn is_capability(r: &DecisionRow) -> bool {
    match r
        .request
        .as_ref()
        .and_then(|v| v.pointer("/request/gating"))
        .and_then(Value::as_bool)
    {
        Some(gating) => !gating,
        None => CAPABILITIES.contains(&r.action.as_str()),
    }
}

/// Folds every default-deny capability row into the row of its call (same decision id,
/// a gating sub-request); kept as its own row when its call's row is not among `rows`.
/// `all_rows` shows every stored row as it is.
pub fn collapse(rows: Vec<DecisionRow>, all_rows: bool) -> Vec<ShownRow> {
    let mut out: Vec<ShownRow> = Vec::with_capacity(rows.len());
    let mut pending: Vec<DecisionRow> = Vec::new();
    for row in rows {
        if !all_rows && row.default_deny && is_capability(&row) {
            pending.push(row);
        } else {
            out.push(ShownRow {
                row,
                collapsed: Vec::new(),
            });
        }
    }
    for cap in pending {
        match out
            .iter_mut()
            .find(|s| s.row.decision_id == cap.decision_id && !is_capability(&s.row))
        {
            Some(parent) => parent.collapsed.push(cap.action),
            None => out.push(ShownRow {
                row: cap,
                collapsed: Vec::new(),
            }),
        }
    }
    out
}

/// The JSON-lines export of one row: every stored field under its stored name, plus `time`
/// (RFC 3339) and `capabilities_denied` (the collapsed capability rows).
pub fn export_json(r: &ShownRow) -> Value {
    let mut v = serde_json::to_value(&r.row).unwrap_or_else(|_| json!({}));
    if let Value::Object(m) = &mut v {
        m.insert(
            "time".into(),
            codespace_engine::wire::rfc3339_ms(r.row.at_ms).into(),
        );
        m.insert("capabilities_denied".into(), json!(r.collapsed));
    }
    v
}

/// The table header.
pub const TABLE_HEADER: &str = "time                      decision  workspace     profile          action            subject                         why                                       decision id";

/// One table line.
pub fn table_line(shown: &ShownRow) -> String {
    let r = &shown.row;
    let mut why = if r.default_deny {
        "(default deny)".to_string()
    } else {
        r.policy_ids.join(",")
    };
    if !r.errors.is_empty() {
        why = format!("{why} errors: {}", r.errors.join("; "));
    }
    if !shown.collapsed.is_empty() {
        why = format!("{why} [sandbox: no {}]", shown.collapsed.join(", no "));
    }
    if let Some(sd) = &r.shadow_decision
        && *sd != r.decision
    {
        why = format!("{why} [shadow: {sd}]");
    }
    let action = if r.action == r.tool {
        format!("{}#{}", r.action, r.sub_index)
    } else {
        format!("{}/{}#{}", r.tool, r.action, r.sub_index)
    };
    let subject = codespace_engine::shown::cut(&r.subject, SUBJECT_CHARS);
    let line = format!(
        "{:<24}  {:<8}  {:<12}  {:<15}  {:<16}  {:<30}  {:<40}  {}",
        codespace_engine::wire::rfc3339_ms(r.at_ms),
        escape(&r.decision),
        escape(&r.workspace),
        escape(&r.profile),
        escape(&action),
        escape(&subject),
        escape(&why),
        escape(&r.decision_id)
    );
    // The request's W3C trace context, when it carried one, after the decision id.
    match &r.trace_parent {
        Some(t) => format!("{line}  traceparent={}", escape(t)),
        None => line,
    }
}

/// How many characters of a subject the table shows (then a `… [cut: N more chars]` marker;
/// `--json` has it whole).
pub const SUBJECT_CHARS: usize = 60;

/// How often `audit --format ocsf --follow` looks for new rows.
const OCSF_FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// `codespace audit --format ocsf`: every stored row the query selects (none collapsed) as one
/// OCSF API Activity event per line; with `follow`, new rows as they are written.
pub fn print_ocsf(
    store: &codespace_store::Store,
    mut q: codespace_store::DecisionQuery,
    follow: bool,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    if follow {
        q.newest_first = false;
    }
    let rows = store.query_decisions(&q)?;
    let mut last_seq = rows.iter().map(|r| r.seq).max().unwrap_or(0);
    for r in &rows {
        writeln!(
            out,
            "{}",
            json_text(&codespace_engine::telemetry::ocsf::decision_event(r))
        )?;
    }
    out.flush()?;
    if !follow {
        return Ok(());
    }
    if last_seq == 0 {
        last_seq = store.max_decision_seq()?;
    }
    q.limit = None;
    q.since_ms = None;
    loop {
        std::thread::sleep(OCSF_FOLLOW_POLL);
        q.after_seq = Some(last_seq);
        let rows = store.query_decisions(&q)?;
        last_seq = rows.iter().map(|r| r.seq).max().unwrap_or(last_seq);
        for r in &rows {
            writeln!(
                out,
                "{}",
                json_text(&codespace_engine::telemetry::ocsf::decision_event(r))
            )?;
        }
        out.flush()?;
    }
}

/// A JSON line of `codespace audit --json` (rows and events), its control characters escaped.
pub fn json_text(v: &Value) -> String {
    codespace_engine::shown::json_line(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, i: i64, action: &str, decision: &str, default_deny: bool) -> DecisionRow {
        DecisionRow {
            decision_id: id.into(),
            tool: "exec_command".into(),
            action: action.into(),
            sub_index: i,
            decision: decision.into(),
            default_deny,
            ..DecisionRow::default()
        }
    }

    #[test]
    fn default_deny_capability_rows_fold_into_their_call() {
        let rows = vec![
            row("d1", 0, "exec_command", "allow", false),
            row("d1", 1, "process_write", "allow", false),
            row("d1", 2, "process_network", "deny", true),
            // Its call's row is not in the result: it stays.
            row("d2", 2, "process_network", "deny", true),
        ];
        let shown = collapse(rows.clone(), false);
        assert_eq!(shown.len(), 3);
        assert_eq!(shown[0].collapsed, vec!["process_network"]);
        assert_eq!(shown[1].row.action, "process_write");
        assert_eq!(shown[2].row.decision_id, "d2");
        assert_eq!(collapse(rows, true).len(), 4);
    }

    #[test]
    fn a_table_line_escapes_controls_and_marks_a_cut_subject() {
        let mut r = row("d1", 0, "exec_command", "allow", false);
        r.subject = format!("echo \x1b]0;owned\x07 {}", "x".repeat(80));
        r.workspace = "w\u{9b}2K".into();
        let line = table_line(&ShownRow {
            row: r,
            collapsed: Vec::new(),
        });
        assert!(
            !line.chars().any(codespace_engine::shown::is_hidden),
            "{line}"
        );
        assert!(line.contains("echo \\x1b]0;owned\\x07 "), "{line}");
        assert!(line.contains("w\\x9b2K"), "{line}");
        assert!(line.contains("… [cut: 36 more chars]"), "{line}");
    }

    #[test]
    fn the_table_and_the_export_show_the_trace_parent() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut r = row("d1", 0, "read", "allow", false);
        let plain = ShownRow {
            row: r.clone(),
            collapsed: Vec::new(),
        };
        assert!(!table_line(&plain).contains("traceparent"));
        assert!(export_json(&plain).get("trace_parent").is_none());
        r.trace_parent = Some(tp.into());
        let traced = ShownRow {
            row: r,
            collapsed: Vec::new(),
        };
        assert!(
            table_line(&traced).ends_with(&format!("traceparent={tp}")),
            "{}",
            table_line(&traced)
        );
        assert_eq!(export_json(&traced)["trace_parent"], tp);
    }
}
