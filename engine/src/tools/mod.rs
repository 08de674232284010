//! The tool handlers, one file per family (their wire types are [`crate::wire`]). A handler is
//! a method of [`crate::gateway::Authorized`], the value the gateway hands over once it has
//! resolved the target and decided the call; handlers never see the gateway itself, so none
//! can run a runner without a decision.

pub mod approvals;
pub mod capabilities;
pub mod fs;
pub mod info;
pub mod ops;
pub mod patch;
pub mod process;
pub mod search;
