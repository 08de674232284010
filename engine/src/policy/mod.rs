//! Policy as product: loading and linting the Cedar files, deciding requests, explaining a
//! decision, hot reload, replaying recorded requests, decision signatures, and the policy test
//! suite runner with its JUnit report.

pub mod alternatives;
pub mod decide;
pub mod explain;
pub mod junit;
pub mod lint;
pub mod load;
pub mod reload;
pub mod replay;
pub mod signature;
pub mod suite;

pub use lint::profiles_named;
pub use load::*;

/// Stack size of every thread that evaluates, validates or parses policies (the server's runtime
/// workers and blocking pool, the reload thread): Cedar walks a policy's expression tree
/// recursively, and a long `||` chain of an operator policy needs far more than the default
/// 2 MiB (a debug build evaluating a 400-long chain needs more than 16 MiB; deeper than Cedar's
/// stack guard allows, the evaluation errors and the request is denied, never a crash). Only
/// the pages a thread touches are used.
pub const EVAL_STACK_BYTES: usize = 64 * 1024 * 1024;
