//! `process_list`: the caller's own process handles in one workspace the gateway has decided
//! the call on (the dispatcher asks once per workspace and merges). Kept apart from the other
//! process tools: it reads the gateway's process registry only, never a runner.

use crate::gateway::Authorized;
use crate::wire::ProcessListEntry;

/// Longest command summary `process_list` shows, in characters.
const COMMAND_SUMMARY_CHARS: usize = 200;

/// The handles of `auth`'s workspace that the calling client started (another client's are
/// never listed, whatever the policy says), appended to `out`.
pub(crate) fn process_list_in(auth: &Authorized<'_>, out: &mut Vec<ProcessListEntry>) {
    let ws = &auth.ws().facts.id;
    let client = &auth.session().client;
    for r in auth.processes.table.registrations() {
        if r.meta.workspace != *ws || r.info.owner != *client {
            continue;
        }
        let facts = crate::request::command_facts(&r.info.argv, r.info.tty);
        let line = facts.get("line").and_then(|l| l.as_str()).unwrap_or("");
        let summary: String = line.chars().take(COMMAND_SUMMARY_CHARS).collect();
        let command = auth.config.redaction.text(&summary).into_owned();
        let started_at = r
            .info
            .started_at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        out.push(ProcessListEntry {
            process_id: r.info.id.clone(),
            workspace_id: ws.clone(),
            state: r.info.state.as_str().to_string(),
            command,
            started_at,
            tty: r.info.tty,
            background: r.meta.background,
        });
    }
}
