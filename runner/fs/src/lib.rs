//! No-follow file I/O beneath a workspace root.
