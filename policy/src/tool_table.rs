//! The one table of tools: each tool's name (= its Cedar action id), title, behaviour hints and
//! operation kind. `tools/list`, `workspace_info.tools_exposed`, `operation_status.kind`, argument
//! parsing and the tidy checks (schema action, policy test, docs row) all derive from it.

/// Every tool this build serves. The wire name of each is [`ToolName::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolName {
    /// `workspace_info`
    WorkspaceInfo,
    /// `read`
    Read,
    /// `find`
    Find,
    /// `apply_patch`
    ApplyPatch,
    /// `operation_status`
    OperationStatus,
    /// `exec_command`
    ExecCommand,
    /// `write_stdin`
    WriteStdin,
    /// `read_process`
    ReadProcess,
    /// `process_status`
    ProcessStatus,
    /// `process_resize`
    ProcessResize,
    /// `terminate_process`
    TerminateProcess,
    /// `approval_create`
    ApprovalCreate,
    /// `approval_resolve`
    ApprovalResolve,
    /// `operation_resume`
    OperationResume,
    /// `grep`
    Grep,
    /// `find_files`
    FindFiles,
    // The operation ledger (issue 31).
    /// `operation_diff`
    OperationDiff,
    /// `operation_revert`
    OperationRevert,
    /// `process_list`
    ProcessList,
    /// `write_file` (issue 31's file toolkit: exact bytes, as a whole-file patch)
    WriteFile,
}

/// One row of the tool table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolSpec {
    /// The tool.
    pub name: ToolName,
    /// A short human title (MCP `title`).
    pub title: &'static str,
    /// The tool changes nothing (MCP `readOnlyHint`).
    pub read_only: bool,
    /// The tool may destroy or overwrite data (MCP `destructiveHint`).
    pub destructive: bool,
    /// Repeating a call with the same arguments has no further effect (MCP `idempotentHint`).
    pub idempotent: bool,
    /// The tool may reach beyond the workspace (MCP `openWorldHint`: a command may use the
    /// network; `tools/list` turns it off when every workspace is network-restricted).
    pub open_world: bool,
    /// Mutating tools record an operation (`operation_status`) with this `kind`.
    pub operation_kind: Option<&'static str>,
}

const fn row(
    name: ToolName,
    title: &'static str,
    read_only: bool,
    destructive: bool,
    idempotent: bool,
    open_world: bool,
    operation_kind: Option<&'static str>,
) -> ToolSpec {
    ToolSpec {
        name,
        title,
        read_only,
        destructive,
        idempotent,
        open_world,
        operation_kind,
    }
}

/// The table, in the order `tools/list` and `workspace_info.tools_exposed` give the tools.
pub const TOOLS: &[ToolSpec] = &[
    row(
        ToolName::WorkspaceInfo,
        "Workspace info",
        true,
        false,
        true,
        false,
        None,
    ),
    row(ToolName::Read, "Read file", true, false, true, false, None),
    row(ToolName::Find, "Find files", true, false, true, false, None),
    row(
        ToolName::ApplyPatch,
        "Apply patch",
        false,
        true,
        false,
        false,
        Some("patch"),
    ),
    row(
        ToolName::OperationStatus,
        "Operation status",
        true,
        false,
        true,
        false,
        None,
    ),
    // A command runs whatever it likes within its sandbox: it may change any writable file and,
    // where the workspace's network allows, reach other hosts.
    row(
        ToolName::ExecCommand,
        "Run command",
        false,
        true,
        false,
        true,
        Some("exec"),
    ),
    row(
        ToolName::WriteStdin,
        "Write to process stdin",
        false,
        true,
        false,
        true,
        Some("write_stdin"),
    ),
    row(
        ToolName::ReadProcess,
        "Read process output",
        true,
        false,
        false,
        false,
        None,
    ),
    row(
        ToolName::ProcessStatus,
        "Process status",
        true,
        false,
        true,
        false,
        None,
    ),
    row(
        ToolName::ProcessResize,
        "Resize process terminal",
        false,
        false,
        true,
        false,
        None,
    ),
    row(
        ToolName::TerminateProcess,
        "Terminate process",
        false,
        true,
        true,
        false,
        Some("terminate"),
    ),
    // Approval holds: creating and answering one changes only the hold (a repeat returns the
    // same hold); a resume runs the held patch or command once (a repeat returns its result).
    row(
        ToolName::ApprovalCreate,
        "Ask for approval",
        false,
        false,
        true,
        false,
        None,
    ),
    row(
        ToolName::ApprovalResolve,
        "Answer an approval",
        false,
        false,
        true,
        false,
        None,
    ),
    row(
        ToolName::OperationResume,
        "Resume an approved call",
        false,
        true,
        true,
        true,
        None,
    ),
    row(
        ToolName::Grep,
        "Search file contents",
        true,
        false,
        true,
        false,
        None,
    ),
    row(
        ToolName::FindFiles,
        "Fuzzy-find files",
        true,
        false,
        true,
        false,
        None,
    ),
    // The operation ledger (issue 31): a diff reads the ledger; a revert is a new patch
    // operation (recorded as `apply_patch`, so it has no operation kind of its own).
    row(
        ToolName::OperationDiff,
        "Operation diff",
        true,
        false,
        true,
        false,
        None,
    ),
    row(
        ToolName::OperationRevert,
        "Revert a patch operation",
        false,
        true,
        false,
        false,
        None,
    ),
    // The caller's own process handles (issue 31's file toolkit).
    row(
        ToolName::ProcessList,
        "List own processes",
        true,
        false,
        true,
        false,
        None,
    ),
    // A whole-file write or append (issue 31's file toolkit): a patch operation like
    // `apply_patch`'s, decided on its path as both `write_file` and `apply_patch`.
    row(
        ToolName::WriteFile,
        "Write file",
        false,
        true,
        false,
        false,
        Some("patch"),
    ),
];

impl ToolName {
    /// The wire name, which is also the Cedar action id.
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolName::WorkspaceInfo => "workspace_info",
            ToolName::Read => "read",
            ToolName::Find => "find",
            ToolName::ApplyPatch => "apply_patch",
            ToolName::OperationStatus => "operation_status",
            ToolName::ExecCommand => "exec_command",
            ToolName::WriteStdin => "write_stdin",
            ToolName::ReadProcess => "read_process",
            ToolName::ProcessStatus => "process_status",
            ToolName::ProcessResize => "process_resize",
            ToolName::TerminateProcess => "terminate_process",
            ToolName::ApprovalCreate => "approval_create",
            ToolName::ApprovalResolve => "approval_resolve",
            ToolName::OperationResume => "operation_resume",
            ToolName::Grep => "grep",
            ToolName::FindFiles => "find_files",
            // The operation ledger (issue 31).
            ToolName::OperationDiff => "operation_diff",
            ToolName::OperationRevert => "operation_revert",
            ToolName::ProcessList => "process_list",
            ToolName::WriteFile => "write_file",
        }
    }

    /// The tool with this wire name.
    pub fn parse(name: &str) -> Option<ToolName> {
        TOOLS.iter().map(|s| s.name).find(|t| t.as_str() == name)
    }

    /// This tool's row of the table.
    pub fn spec(self) -> &'static ToolSpec {
        // Every variant has a row (checked by `every_tool_has_one_row`); the fallback is only
        // there so this function cannot panic.
        TOOLS
            .iter()
            .find(|s| s.name == self)
            .unwrap_or(&FALLBACK_SPEC)
    }
}

const FALLBACK_SPEC: ToolSpec = row(ToolName::WorkspaceInfo, "", true, false, true, false, None);

/// The wire names of every tool, in table order.
pub fn tool_names() -> Vec<&'static str> {
    TOOLS.iter().map(|s| s.name.as_str()).collect()
}

/// The `kind` `operation_status` shows for an operation recorded by `tool` (stored by name).
pub fn operation_kind(tool: &str) -> &'static str {
    ToolName::parse(tool)
        .and_then(|t| t.spec().operation_kind)
        .unwrap_or("other")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every variant of [`ToolName`], written as an exhaustive match so a new variant without a
    /// table row fails to compile here or fails the test below.
    fn all_variants() -> Vec<ToolName> {
        let mut out = Vec::new();
        for t in TOOLS.iter().map(|s| s.name) {
            match t {
                ToolName::WorkspaceInfo
                | ToolName::Read
                | ToolName::Find
                | ToolName::ApplyPatch
                | ToolName::OperationStatus
                | ToolName::ExecCommand
                | ToolName::WriteStdin
                | ToolName::ReadProcess
                | ToolName::ProcessStatus
                | ToolName::ProcessResize
                | ToolName::TerminateProcess
                | ToolName::ApprovalCreate
                | ToolName::ApprovalResolve
                | ToolName::OperationResume
                | ToolName::Grep
                | ToolName::FindFiles
                // The operation ledger (issue 31).
                | ToolName::OperationDiff
                | ToolName::OperationRevert
                | ToolName::ProcessList
                | ToolName::WriteFile => out.push(t),
            }
        }
        out
    }

    #[test]
    fn every_tool_has_one_row() {
        let names: BTreeSet<_> = all_variants().into_iter().collect();
        assert_eq!(names.len(), TOOLS.len(), "one row per tool, no duplicates");
        assert_eq!(names.len(), 20);
        for t in names {
            assert_eq!(t.spec().name, t);
            assert_eq!(ToolName::parse(t.as_str()), Some(t));
            assert!(!t.spec().title.is_empty());
        }
    }

    #[test]
    fn hints_are_consistent() {
        for s in TOOLS {
            assert!(
                !(s.read_only && s.destructive),
                "{}: read-only tools destroy nothing",
                s.name.as_str()
            );
            assert!(
                !(s.read_only && s.operation_kind.is_some()),
                "{}: read-only tools record no operation",
                s.name.as_str()
            );
        }
        assert_eq!(operation_kind("apply_patch"), "patch");
        assert_eq!(operation_kind("exec_command"), "exec");
        assert_eq!(operation_kind("no_such_tool"), "other");
        assert_eq!(ToolName::parse("no_such_tool"), None);
    }
}
