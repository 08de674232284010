//! `ConfigError`: a config that cannot be used, in one line naming the field.

/// A config that cannot be used; the message names the field.
#[derive(Debug, thiserror::Error)]
#[error("invalid config: {0}")]
pub struct ConfigError(pub String);
