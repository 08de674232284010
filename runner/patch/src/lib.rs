//! V4A patch parsing and planning (pure).
