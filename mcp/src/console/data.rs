//! What the console's pages show, read from the store and the policy set on the blocking pool:
//! pending holds (redacted as `approvals show` redacts them), filtered decision rows with their
//! hourly counts, a decision's explanation, per-policy hit counts and shadow flips, live
//! processes, recent operations and an operation's ledger diff (withheld paths stay withheld).

use codespace_engine::wire::LedgerFileView;
use codespace_engine::{Config, PolicyStore};
use codespace_store::{ApprovalState, DecisionQuery, DecisionRow, OperationRow, ProcessRow, Store};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What the pages read and, when live, change.
pub struct Backend {
    /// The config (profiles, redaction, workspaces, operators).
    pub config: Config,
    /// The store (holds, audit rows, processes, operations).
    pub store: Option<Arc<Store>>,
    /// The policies in force (and the shadow set).
    pub policies: Arc<PolicyStore>,
    /// True under `serve --http`: grant and deny are offered. False for `codespace console`.
    pub live: bool,
}

/// Who signed in: a client name and the groups it belongs to (empty for static tokens; an OIDC
/// identity fills them from its claims).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The client (or user) name: the resolver recorded when it answers a hold.
    pub name: String,
    /// Group names, matched against `console.operators` like the name.
    pub groups: Vec<String>,
    /// The person, when an OIDC access token signed in (`name` is then the user's id): the
    /// `context.session.user` of the holds this identity resolves.
    pub user: Option<codespace_engine::policy::user::UserFacts>,
}

/// Rows the decisions page lists at most.
const LIST_ROWS: usize = 200;
/// Rows the chart and the hit counts read at most.
const SCAN_ROWS: usize = 50_000;
/// The decisions page's default window when no `since` is given.
const DEFAULT_WINDOW_MS: i64 = 24 * 60 * 60 * 1000;

fn store_of(b: &Backend) -> Result<&Arc<Store>, String> {
    b.store
        .as_ref()
        .ok_or_else(|| "this server runs without a store".to_string())
}

/// One pending hold as the queue shows it.
#[derive(Debug, Clone)]
pub(crate) struct Hold {
    pub(crate) id: String,
    pub(crate) tool: String,
    pub(crate) workspace: String,
    pub(crate) requested_by: String,
    pub(crate) transport: String,
    pub(crate) created: String,
    pub(crate) expires: String,
    pub(crate) summary: String,
    /// The whole command line, quoted as `approvals show` quotes it.
    pub(crate) command: Option<String>,
    pub(crate) cwd: Option<String>,
    pub(crate) env_names: Vec<String>,
    /// The patch text (redacted).
    pub(crate) patch: Option<String>,
    /// path → version pinned when the hold was asked (`absent` for a new file).
    pub(crate) versions: Vec<(String, String)>,
    /// Every other argument, as one line each.
    pub(crate) other: Vec<(String, String)>,
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => codespace_engine::shown::json_line(other),
    }
}

/// The pending holds, oldest first.
pub(crate) fn pending_holds(b: &Backend) -> Result<Vec<Hold>, String> {
    let store = store_of(b)?;
    let now = codespace_store::now_ms();
    let rows = store
        .approvals(None, 1000, now)
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for r in rows
        .iter()
        .rev()
        .filter(|r| r.state == ApprovalState::Pending)
    {
        let held = crate::approvals_cli::held_view(&b.config, r);
        let h = held.as_object();
        let get = |k: &str| h.and_then(|m| m.get(k));
        let command = match get("command") {
            Some(Value::Array(argv)) => {
                let words: Vec<String> = argv.iter().map(text_of).collect();
                let facts = codespace_engine::request::command_facts(&words, false);
                facts
                    .get("line")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            }
            _ => None,
        };
        let env_names = match get("env_names") {
            Some(Value::Array(n)) => n.iter().map(text_of).collect(),
            _ => Vec::new(),
        };
        let versions = r
            .facts
            .as_ref()
            .and_then(|f| f.get("pinned"))
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), text_of(v))).collect())
            .unwrap_or_default();
        let other = h
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| {
                        !matches!(
                            k.as_str(),
                            "patch" | "command" | "cwd" | "env" | "env_names"
                        )
                    })
                    .map(|(k, v)| (k.clone(), text_of(v)))
                    .collect()
            })
            .unwrap_or_default();
        out.push(Hold {
            id: r.approval_id.clone(),
            tool: r.tool.clone(),
            workspace: r.workspace.clone(),
            requested_by: r.requested_by.clone(),
            transport: r.transport.clone(),
            created: codespace_engine::wire::rfc3339_ms(r.created_ms),
            expires: codespace_engine::wire::rfc3339_ms(r.expires_ms),
            summary: r.summary.clone(),
            command,
            cwd: get("cwd").map(text_of),
            env_names,
            patch: get("patch").map(text_of),
            versions,
            other,
        });
    }
    Ok(out)
}

/// The decisions page's filters (query string; an empty field is no filter).
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub(crate) struct DecisionFilter {
    pub(crate) tool: Option<String>,
    /// `allow`, `deny` or `hold`.
    pub(crate) result: Option<String>,
    pub(crate) profile: Option<String>,
    /// RFC 3339, or `YYYY-MM-DDTHH:MM` (UTC; what a datetime-local field sends).
    pub(crate) since: Option<String>,
    pub(crate) until: Option<String>,
}

fn nonempty(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// A time filter as unix ms.
pub(crate) fn parse_time(s: &str) -> Result<i64, String> {
    use time::format_description::well_known::Rfc3339;
    let t = time::OffsetDateTime::parse(s, &Rfc3339)
        .or_else(|_| {
            let f = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]");
            time::PrimitiveDateTime::parse(s, &f).map(time::PrimitiveDateTime::assume_utc)
        })
        .map_err(|_| format!("`{s}` is not a time (RFC 3339 or YYYY-MM-DDTHH:MM, UTC)"))?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).map_err(|e| e.to_string())
}

/// What a row counts as in the chart and the `result` filter: a `confirm` row (audited only
/// when Cedar held the call for a human) is a hold; a gating row is allow, deny or masked.
pub(crate) fn result_of(r: &DecisionRow) -> &'static str {
    match (r.action.as_str(), r.decision.as_str()) {
        ("confirm", _) => "hold",
        (_, "allow") => "allow",
        (_, "masked") => "masked",
        _ => "deny",
    }
}

/// One hour's counts of one profile and tool.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Bucket {
    /// Start of the hour (RFC 3339).
    pub(crate) hour: String,
    pub(crate) profile: String,
    pub(crate) tool: String,
    pub(crate) allow: u64,
    pub(crate) deny: u64,
    pub(crate) hold: u64,
}

/// The decisions page.
#[derive(Debug, Clone, Default)]
pub(crate) struct Decisions {
    /// The rows shown, each with what it counts as (`allow`, `deny`, `hold`, `masked`).
    pub(crate) rows: Vec<(DecisionRow, &'static str)>,
    pub(crate) buckets: Vec<Bucket>,
    pub(crate) error: Option<String>,
    pub(crate) scanned: usize,
}

/// The filtered timeline (gating rows, newest first) and its hourly counts.
pub(crate) fn decisions(b: &Backend, f: &DecisionFilter) -> Result<Decisions, String> {
    let store = store_of(b)?;
    let mut out = Decisions::default();
    let since = match nonempty(&f.since).map(parse_time).transpose() {
        Ok(s) => s,
        Err(e) => {
            out.error = Some(e);
            return Ok(out);
        }
    };
    let until = match nonempty(&f.until).map(parse_time).transpose() {
        Ok(s) => s,
        Err(e) => {
            out.error = Some(e);
            return Ok(out);
        }
    };
    let since = since.unwrap_or_else(|| codespace_store::now_ms() - DEFAULT_WINDOW_MS);
    let result = nonempty(&f.result);
    let q = DecisionQuery {
        since_ms: Some(since),
        until_ms: until,
        tool: nonempty(&f.tool).map(str::to_string),
        decision: match result {
            Some("allow" | "hold") => Some("allow".into()),
            Some("deny") => Some("deny".into()),
            _ => None,
        },
        limit: Some(SCAN_ROWS),
        newest_first: true,
        ..DecisionQuery::default()
    };
    let rows = store.query_decisions(&q).map_err(|e| e.to_string())?;
    out.scanned = rows.len();
    let profile = nonempty(&f.profile);
    let keep: Vec<(DecisionRow, &'static str)> = rows
        .into_iter()
        // Gating rows and the `confirm` rows of held calls; sandbox-capability rows shape a
        // sandbox, they decide no call.
        .filter(|r| r.action == "confirm" || !crate::audit_view::is_capability(r))
        .filter(|r| profile.is_none_or(|p| r.profile == p))
        .map(|r| {
            let k = result_of(&r);
            (r, k)
        })
        .filter(|(_, k)| result.is_none_or(|want| *k == want))
        .collect();
    let mut buckets: BTreeMap<(i64, String, String), Bucket> = BTreeMap::new();
    for (r, kind) in &keep {
        let hour = r.at_ms - r.at_ms.rem_euclid(3_600_000);
        let b = buckets
            .entry((hour, r.profile.clone(), r.tool.clone()))
            .or_insert_with(|| Bucket {
                hour: codespace_engine::wire::rfc3339_ms(hour),
                profile: r.profile.clone(),
                tool: r.tool.clone(),
                allow: 0,
                deny: 0,
                hold: 0,
            });
        match *kind {
            "allow" => b.allow += 1,
            "hold" => b.hold += 1,
            _ => b.deny += 1,
        }
    }
    out.buckets = buckets.into_values().collect();
    out.rows = keep.into_iter().take(LIST_ROWS).collect();
    Ok(out)
}

/// One sub-request of a decision with the explanation of its recorded request under the
/// policies in force.
#[derive(Debug, Clone)]
pub(crate) struct Explained {
    pub(crate) row: DecisionRow,
    pub(crate) explanation: String,
}

/// A decision's rows, each explained by `policy explain`'s code.
pub(crate) fn decision(b: &Backend, id: &str) -> Result<Vec<Explained>, String> {
    let store = store_of(b)?;
    let rows = store
        .query_decisions(&DecisionQuery {
            decision_id: Some(id.to_string()),
            ..DecisionQuery::default()
        })
        .map_err(|e| e.to_string())?;
    let snap = b.policies.snapshot();
    Ok(rows
        .into_iter()
        .map(|row| {
            let explanation = match row
                .request
                .as_ref()
                .map(codespace_engine::policy::recorded::RecordedRequest::from_json)
            {
                None => "(no recorded request: logged before requests were recorded)".into(),
                Some(Err(e)) => format!("(the recorded request cannot be read: {e})"),
                Some(Ok(rec)) => {
                    let x = codespace_engine::policy::explain::explain_requests(
                        &snap,
                        &rec.profile_tree(),
                        &rec.workspace,
                        &rec.tool,
                        std::slice::from_ref(&rec.request),
                    );
                    codespace_engine::policy::explain::render_text(&x)
                }
            };
            Explained { row, explanation }
        })
        .collect())
}

/// One policy of the set in force with its hits in the log.
#[derive(Debug, Clone)]
pub(crate) struct PolicyHits {
    pub(crate) id: String,
    pub(crate) file: String,
    pub(crate) line: usize,
    pub(crate) forbid: bool,
    pub(crate) reason: Option<String>,
    pub(crate) hits: u64,
}

/// The policies page.
#[derive(Debug, Clone)]
pub(crate) struct Policies {
    pub(crate) sha256: String,
    pub(crate) signer: Option<String>,
    pub(crate) loaded_at: String,
    pub(crate) policies: Vec<PolicyHits>,
    pub(crate) scanned: usize,
    /// The shadow set's hash and the rows where it decided otherwise.
    pub(crate) shadow: Option<(String, Vec<DecisionRow>)>,
}

/// The set in force, hit counts over the log's newest rows, and the shadow set's flips.
pub(crate) fn policies(b: &Backend) -> Result<Policies, String> {
    let snap = b.policies.snapshot();
    let mut hits: BTreeMap<String, u64> = BTreeMap::new();
    let mut scanned = 0;
    let mut shadow = None;
    if let Some(store) = &b.store {
        let rows = store
            .query_decisions(&DecisionQuery {
                limit: Some(SCAN_ROWS),
                newest_first: true,
                ..DecisionQuery::default()
            })
            .map_err(|e| e.to_string())?;
        scanned = rows.len();
        for r in &rows {
            for p in &r.policy_ids {
                *hits.entry(p.clone()).or_default() += 1;
            }
        }
        if let Some(sh) = b.policies.shadow() {
            let flips = store
                .query_decisions(&DecisionQuery {
                    shadow_flips: true,
                    limit: Some(LIST_ROWS),
                    newest_first: true,
                    ..DecisionQuery::default()
                })
                .map_err(|e| e.to_string())?;
            shadow = Some((sh.sha256.clone(), flips));
        }
    }
    let policies = snap
        .meta
        .values()
        .map(|m| PolicyHits {
            id: m.id.clone(),
            file: m.file.clone(),
            line: m.line,
            forbid: m.forbid,
            reason: m.reason.clone(),
            hits: hits.get(&m.id).copied().unwrap_or(0),
        })
        .collect();
    Ok(Policies {
        sha256: snap.sha256.clone(),
        // The verified signer of the set in force, else the store's record of that set (the
        // read-only console does not verify signatures itself).
        signer: snap
            .signer
            .as_ref()
            .map(|s| format!("{} ({})", s.principal, s.key))
            .or_else(|| {
                let rec = b.store.as_ref()?.policy_set(&snap.sha256).ok()??;
                Some(format!("{} ({})", rec.signer_principal?, rec.signer_key?))
            }),
        loaded_at: codespace_engine::wire::rfc3339_ms(snap.loaded_at_ms),
        policies,
        scanned,
        shadow,
    })
}

/// The processes and operations page.
#[derive(Debug, Clone, Default)]
pub(crate) struct Processes {
    /// Live processes per workspace.
    pub(crate) live: Vec<(String, Vec<ProcessRow>)>,
    pub(crate) operations: Vec<OperationRow>,
}

/// Live processes of every configured workspace and the newest operations.
pub(crate) fn processes(b: &Backend) -> Result<Processes, String> {
    let store = store_of(b)?;
    let mut live = Vec::new();
    for ws in b.config.workspaces.keys() {
        let ids = store.running_processes(ws).map_err(|e| e.to_string())?;
        let mut rows = Vec::new();
        for id in ids {
            if let Some(p) = store.process(&id).map_err(|e| e.to_string())? {
                rows.push(p);
            }
        }
        live.push((ws.clone(), rows));
    }
    let operations = store
        .recent_operations(None, 50)
        .map_err(|e| e.to_string())?;
    Ok(Processes { live, operations })
}

/// One operation with its ledger files and diff.
#[derive(Debug, Clone)]
pub(crate) struct Operation {
    pub(crate) row: Option<OperationRow>,
    pub(crate) files: Vec<LedgerFileView>,
    pub(crate) diff: String,
}

/// An operation's row and its ledger diff (`operation_diff`'s rendering).
pub(crate) fn operation(b: &Backend, id: &str) -> Result<Operation, String> {
    let store = store_of(b)?;
    let row = store.operation_by_id(id).map_err(|e| e.to_string())?;
    let (files, diff) = codespace_engine::tools::ledger::operator_diff(store, id)
        .map_err(|e| format!("{}: {}", e.code.as_str(), e.message))?;
    Ok(Operation { row, files, diff })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_filters_take_rfc3339_or_a_datetime_local_value_as_utc() {
        assert_eq!(parse_time("1970-01-01T00:01"), Ok(60_000));
        assert_eq!(parse_time("1970-01-01T00:00:01.5Z"), Ok(1_500));
        assert_eq!(parse_time("1970-01-01T01:00:00+01:00"), Ok(0));
        assert!(parse_time("yesterday").is_err());
        assert!(parse_time("<script>").is_err());
    }
}
