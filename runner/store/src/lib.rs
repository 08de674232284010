//! The SQLite store: decisions, operations, events, processes, patch journal.
