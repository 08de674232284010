//! Decisions, a floor below the engine: the parsed tool calls and the Cedar request model built
//! from them, loading and linting the Cedar files, deciding requests (the one `Decider`),
//! explaining a decision, hot reload, recorded requests, decision signatures, signed policy sets. The policy test
//! suite, replay and coverage live in `codespace-policy-tools`. It depends on Cedar and the
//! runner crates, never on the engine.

#![forbid(unsafe_code)]

pub mod action;
pub mod command_facts;
pub mod config;
pub mod decide;
pub mod decider;
pub mod error;
pub mod explain;
pub mod facts;
pub mod lint;
pub mod load;
pub mod read_args;
pub mod recorded;
pub mod reload;
pub mod request;
pub mod rows;
pub mod set_signature;
pub mod signature;
pub mod slice;
pub mod suggest;
pub mod templates;
pub mod tool_table;
pub mod user;
pub mod wire;

pub use action::Action;
pub use decide::{Decision, SubDecision};
pub use decider::Decider;
pub use lint::profiles_named;
pub use load::*;
pub use rows::{AuditSink, CollectRows, NoRows, RowKind};

/// Stack size of every thread that evaluates, validates or parses policies (the server's runtime
/// workers and blocking pool, the reload thread): Cedar walks a policy's expression tree
/// recursively, and a long `||` chain of an operator policy needs far more than the default
/// 2 MiB (a debug build evaluating a 400-long chain needs more than 16 MiB; deeper than Cedar's
/// stack guard allows, the evaluation errors and the request is denied, never a crash). Only
/// the pages a thread touches are used.
pub const EVAL_STACK_BYTES: usize = 64 * 1024 * 1024;
