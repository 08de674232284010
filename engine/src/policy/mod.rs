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
