//! `policy diff`'s replay of commands' secret masks: every recorded command whose workspace
//! enforced masks is asked again, under the set in force and under the candidate, which paths a
//! `read` by its caller would be refused (what its sandbox withholds). A path withheld before and
//! readable after is a "mask widened" change, the reverse a "mask narrowed" one. The paths asked
//! are the ones the command's mask rows recorded, every path the replayed traffic names in that
//! workspace and, with a config whose workspace root is on this machine, the files there now.

use codespace_engine::Config;
use codespace_engine::facts::MaskingFact;
use codespace_engine::policy::Action;
use codespace_engine::policy::decide::SubDecision;
use codespace_policy_tools::replay::{Flip, RecordedRequest, Replayer, changed_policies};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// How many files of a workspace root the listing reads at most.
const MAX_LISTED: usize = 100_000;

/// A command that got (or would have got) masks: its label and its recorded request.
struct Command {
    label: String,
    rec: RecordedRequest,
}

/// What the replayed rows tell about masks, gathered row by row.
#[derive(Default)]
pub(crate) struct MaskRows {
    /// Allowed commands of workspaces with enforced masks, by decision id.
    commands: BTreeMap<String, Command>,
    /// Paths recorded as withheld (`masked` rows), by decision id.
    withheld: BTreeMap<String, BTreeSet<String>>,
    /// Paths the traffic names, by workspace id.
    known: BTreeMap<String, BTreeSet<String>>,
    /// `masked` rows seen.
    pub(crate) rows: usize,
}

/// One path whose mask changes under the candidate, for the commands of one context.
pub(crate) struct MaskChange {
    /// Widening: the candidate no longer withholds the path; narrowing: it now does.
    pub(crate) flip: Flip,
    pub(crate) workspace: String,
    pub(crate) profile: String,
    pub(crate) tool: String,
    pub(crate) path: String,
    /// The policies whose part changed (as for a flip group).
    pub(crate) policies: Vec<String>,
    /// The labels of the commands it concerns.
    pub(crate) commands: Vec<String>,
}

impl MaskChange {
    /// `mask_widened` / `mask_narrowed`.
    pub(crate) fn kind(&self) -> &'static str {
        match self.flip {
            Flip::Widening => "mask_widened",
            Flip::Narrowing => "mask_narrowed",
        }
    }

    /// `mask widened: PATH no longer withheld` / `mask narrowed: PATH now withheld`.
    pub(crate) fn text(&self) -> String {
        match self.flip {
            Flip::Widening => format!("mask widened: {} no longer withheld", self.path),
            Flip::Narrowing => format!("mask narrowed: {} now withheld", self.path),
        }
    }

    /// The JSON form (`policy diff --json`'s `mask_changes`).
    pub(crate) fn to_json(&self, examples: usize) -> Value {
        json!({
            "change": self.kind(),
            "direction": self.flip.as_str(),
            "text": self.text(),
            "workspace": self.workspace,
            "profile": self.profile,
            "tool": self.tool,
            "path": self.path,
            "policies": self.policies,
            "commands": self.commands.len(),
            "examples": self.commands.iter().take(examples).collect::<Vec<_>>(),
        })
    }
}

impl MaskRows {
    /// Takes one replayed row. True when it is a mask row (decision `masked`), which is not
    /// replayed as a request of its own.
    pub(crate) fn row(
        &mut self,
        decision_id: &str,
        decision: &str,
        workspace: &str,
        path: Option<&str>,
        label: &str,
        rec: Option<&RecordedRequest>,
    ) -> bool {
        if let Some(p) = path.filter(|p| !p.is_empty() && *p != ".") {
            self.known
                .entry(workspace.to_string())
                .or_default()
                .insert(p.to_string());
        }
        if decision == codespace_store::MASKED {
            self.rows += 1;
            if let Some(p) = path {
                self.withheld
                    .entry(decision_id.to_string())
                    .or_default()
                    .insert(p.to_string());
            }
            return true;
        }
        if let Some(rec) = rec
            && decision == "allow"
            && matches!(rec.request.action.as_str(), "exec_command" | "hook")
            && rec.workspace.secret_masking == MaskingFact::Enforced
            && !self.commands.contains_key(decision_id)
        {
            self.commands.insert(
                decision_id.to_string(),
                Command {
                    label: label.to_string(),
                    rec: rec.clone(),
                },
            );
        }
        false
    }

    /// Adds the files under each configured workspace root that exists here (a bounded walk;
    /// symbolic links are not followed).
    pub(crate) fn add_listings(&mut self, config: Option<&Config>) {
        let Some(config) = config else { return };
        for (id, ws) in &config.workspaces {
            if !self.commands.values().any(|c| &c.rec.workspace.id == id) {
                continue;
            }
            let known = self.known.entry(id.clone()).or_default();
            list(&ws.root, "", known, &mut 0);
        }
    }

    /// The commands whose masks replayed.
    pub(crate) fn commands(&self) -> usize {
        self.commands.len()
    }

    /// Re-decides every command's masks under both sets; the changes, widening first.
    pub(crate) fn replay(
        &self,
        before: &mut Replayer<'_>,
        after: &mut Replayer<'_>,
    ) -> Vec<MaskChange> {
        // Commands with the same workspace facts, profile chain, tool and caller get the same
        // answers: decide once per such context and path.
        let mut contexts: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for (id, c) in &self.commands {
            contexts.entry(context_key(&c.rec)).or_default().push(id);
        }
        let mut decided: HashMap<String, (SubDecision, SubDecision)> = HashMap::new();
        let mut out = Vec::new();
        for ids in contexts.values() {
            let Some(first) = ids.first().and_then(|id| self.commands.get(*id)) else {
                continue;
            };
            let ws = &first.rec.workspace;
            let mut paths: BTreeSet<&String> = ids
                .iter()
                .filter_map(|id| self.withheld.get(*id))
                .flatten()
                .collect();
            paths.extend(self.known.get(&ws.id).into_iter().flatten());
            for path in paths {
                if ws.is_server_owned(path) {
                    continue; // always withheld, whatever the policy set says
                }
                let rec = read_request(&first.rec, path);
                let key = format!("{}\0{path}", context_key(&first.rec));
                let (b, a) = decided
                    .entry(key)
                    .or_insert_with(|| (before.decide(&rec), after.decide(&rec)))
                    .clone();
                let Some(flip) = Flip::of("read", b.allowed, a.allowed) else {
                    continue;
                };
                let commands: Vec<String> = ids
                    .iter()
                    .filter(|id| {
                        // A widened mask concerns the commands it was recorded for.
                        flip == Flip::Narrowing
                            || self.withheld.get(**id).is_some_and(|w| w.contains(path))
                    })
                    .filter_map(|id| self.commands.get(*id).map(|c| c.label.clone()))
                    .collect();
                if commands.is_empty() {
                    continue;
                }
                out.push(MaskChange {
                    flip,
                    workspace: ws.id.clone(),
                    profile: ws.profile.clone(),
                    tool: first.rec.tool.clone(),
                    path: path.clone(),
                    policies: changed_policies(&b, &a),
                    commands,
                });
            }
        }
        out.sort_by(|x, y| {
            y.flip
                .cmp(&x.flip)
                .then(y.commands.len().cmp(&x.commands.len()))
                .then(x.path.cmp(&y.path))
        });
        out
    }
}

/// What makes two commands' masks the same question: workspace facts, profile chain, tool and
/// the caller (`context.session`).
fn context_key(rec: &RecordedRequest) -> String {
    serde_json::to_string(&(
        &rec.workspace,
        &rec.ancestors,
        &rec.tool,
        rec.request.context.get("session"),
    ))
    .unwrap_or_default()
}

/// The `read` a command's mask asks for `path`: what the gateway asks before the command
/// starts (tool `read`, the caller's session, one link).
fn read_request(command: &RecordedRequest, path: &str) -> RecordedRequest {
    let mut rec = command.clone();
    let session = command
        .request
        .context
        .get("session")
        .cloned()
        .unwrap_or(Value::Null);
    // The gateway asks as the `read` tool would.
    rec.tool = "read".into();
    rec.request.action = Action::READ;
    rec.request.path = path.to_string();
    rec.request.kind = String::new();
    rec.request.gating = true;
    rec.request.context = json!({ "session": session });
    rec.request.subject = path.to_string();
    rec.request.resource_tool = None;
    rec.request.links = 1;
    rec.request.network = None;
    rec
}

/// Adds the workspace-relative paths of the files and directories under `dir` (at most
/// [`MAX_LISTED`]); names that are not UTF-8 and symbolic links' targets are skipped.
fn list(dir: &Path, prefix: &str, out: &mut BTreeSet<String>, seen: &mut usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if *seen >= MAX_LISTED {
            return;
        }
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        *seen += 1;
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if is_dir {
            list(&e.path(), &rel, out, seen);
        }
        out.insert(rel);
    }
}
