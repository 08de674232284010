//! The tool handlers, one file per family (their wire types are [`crate::wire`]). A handler is
//! a free function over a [`crate::gateway::Authorized`], the value the gateway hands over once
//! it has resolved the target and decided the call, and returns its tool's typed result (the
//! dispatcher wraps it in a [`crate::wire::ToolResult`]); handlers never see the gateway itself,
//! so none can run a runner without a decision.

pub mod approvals;
pub mod capabilities;
pub mod fs;
pub mod info;
// The operation ledger (issue 31).
pub mod ledger;
pub mod ops;
pub mod patch;
// The operator's before_patch / after_patch hooks (issue 31).
mod patch_hooks;
mod patch_runner;
pub mod process;
pub mod process_list;
pub mod search;
// A whole-file write or append as a one-file patch (issue 31).
pub mod write_file;
