//! The gateway: config, Cedar policy, request building, decisions.
