//! `process_list`: the caller's own process handles in one workspace the gateway has decided
//! the call on (the dispatcher asks once per workspace and merges). Kept apart from the other
//! process tools: it reads the gateway's process registry only, never a runner.

use crate::gateway::Authorized;
use crate::wire::ProcessListEntry;

/// Longest command summary `process_list` shows, in characters.
const COMMAND_SUMMARY_CHARS: usize = 200;

/// The handles of `auth`'s workspace that the calling client started (another client's are
/// never listed, whatever the policy says), appended to `out`. A live one's state is asked of
/// its runner (a worker that is gone makes it `lost`).
pub(crate) async fn process_list_in(auth: &Authorized<'_>, out: &mut Vec<ProcessListEntry>) {
    use crate::processes::{Standing, state_str};
    let ws = &auth.ws().facts.id;
    let client = &auth.session().client;
    for (id, e) in auth.processes.entries() {
        if e.workspace != *ws || e.client != *client {
            continue;
        }
        let state = match e.standing {
            Standing::Lost => "lost",
            Standing::Live | Standing::Ended => {
                let asked = e
                    .runner
                    .status(codespace_runner_api::ProcessRef {
                        process_id: id.clone(),
                    })
                    .await;
                match asked {
                    Ok(s) => state_str(s.state),
                    Err(_) if e.standing == Standing::Ended => "exited",
                    Err(_) => "lost",
                }
            }
        };
        let facts = crate::request::command_facts(&e.argv, e.tty);
        let line = facts.get("line").and_then(|l| l.as_str()).unwrap_or("");
        let summary: String = line.chars().take(COMMAND_SUMMARY_CHARS).collect();
        let command = auth.config.redaction.text(&summary).into_owned();
        out.push(ProcessListEntry {
            process_id: id,
            workspace_id: ws.clone(),
            state: state.to_string(),
            command,
            started_at: e.started_ms / 1000,
            tty: e.tty,
            background: e.background,
        });
    }
}
