//! The tools: their wire types ([`wire`]) and their handlers, one file per family. A handler is
//! a method of [`crate::gateway::Authorized`], the value the gateway hands over once it has
//! resolved the target and decided the call; handlers never see the gateway itself, so none
//! can run a runner without a decision.

pub mod approvals;
pub mod capabilities;
pub mod fs;
pub mod info;
pub mod ops;
pub mod patch;
pub mod search;
pub mod wire;

pub use wire::*;
