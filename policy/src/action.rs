//! The Cedar actions a sub-request names: every tool (its wire name is its action id), the
//! sandbox capabilities `process_write` and `process_network`, `confirm`, the egress proxy's
//! `network_connect`, the operator's `hook`s and `read_skill` (an operator skill shown or read).
//! One spelling each, the schema's
//! (`schema/codespace.cedarschema`).

use crate::tool_table::ToolName;

/// A Cedar action a sub-request can ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// A tool's own action.
    Tool(ToolName),
    /// May a command write under this directory (one per write-scope candidate).
    ProcessWrite,
    /// May a command use the network.
    ProcessNetwork,
    /// Must a human confirm this mutation first.
    Confirm,
    /// May a command's connection through the egress proxy go to this target.
    NetworkConnect,
    /// May an operator-configured hook run (issue 31; `context.hook`).
    Hook,
    /// May the caller see or read an operator skill of `skills_dir` (issue 31;
    /// `context.skill.name`).
    ReadSkill,
}

impl Action {
    /// `read`.
    pub const READ: Action = Action::Tool(ToolName::Read);
    /// `find`.
    pub const FIND: Action = Action::Tool(ToolName::Find);
    /// `grep`.
    pub const GREP: Action = Action::Tool(ToolName::Grep);
    /// `find_files`.
    pub const FIND_FILES: Action = Action::Tool(ToolName::FindFiles);
    /// `apply_patch`.
    pub const APPLY_PATCH: Action = Action::Tool(ToolName::ApplyPatch);
    /// `exec_command`.
    pub const EXEC_COMMAND: Action = Action::Tool(ToolName::ExecCommand);
    /// `workspace_info`.
    pub const WORKSPACE_INFO: Action = Action::Tool(ToolName::WorkspaceInfo);

    /// The Cedar action id.
    pub const fn as_str(self) -> &'static str {
        match self {
            Action::Tool(t) => t.as_str(),
            Action::ProcessWrite => "process_write",
            Action::ProcessNetwork => "process_network",
            Action::Confirm => "confirm",
            Action::NetworkConnect => "network_connect",
            Action::Hook => "hook",
            Action::ReadSkill => "read_skill",
        }
    }

    /// The action with this id.
    pub fn parse(id: &str) -> Option<Action> {
        match id {
            "process_write" => Some(Action::ProcessWrite),
            "process_network" => Some(Action::ProcessNetwork),
            "confirm" => Some(Action::Confirm),
            "network_connect" => Some(Action::NetworkConnect),
            "hook" => Some(Action::Hook),
            "read_skill" => Some(Action::ReadSkill),
            _ => ToolName::parse(id).map(Action::Tool),
        }
    }
}

impl From<ToolName> for Action {
    fn from(t: ToolName) -> Action {
        Action::Tool(t)
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Action {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Action {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl serde::Serialize for Action {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Action {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Action, D::Error> {
        let id = String::deserialize(d)?;
        Action::parse(&id).ok_or_else(|| serde::de::Error::custom(format!("unknown action `{id}`")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_round_trips_and_is_in_the_schema() {
        let schema = include_str!("../../schema/codespace.cedarschema");
        let mut all: Vec<Action> = crate::tool_table::TOOLS
            .iter()
            .map(|s| Action::Tool(s.name))
            .collect();
        all.extend([
            Action::ProcessWrite,
            Action::ProcessNetwork,
            Action::Confirm,
            Action::NetworkConnect,
            Action::Hook,
            Action::ReadSkill,
        ]);
        for a in all {
            assert_eq!(Action::parse(a.as_str()), Some(a));
            let json = serde_json::to_value(a).unwrap_or_default();
            assert_eq!(json, serde_json::json!(a.as_str()));
            assert!(
                schema.contains(&format!("action {}", a.as_str()))
                    || schema.contains(&format!(", {}", a.as_str())),
                "{a} is not a schema action"
            );
        }
        assert_eq!(Action::parse("fs_read"), None);
    }
}
