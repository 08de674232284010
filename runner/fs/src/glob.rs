//! `GlobFilter`: matching workspace-relative paths against a user glob.

use globset::{GlobBuilder, GlobMatcher};

/// A glob that could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid glob: {message}")]
pub struct GlobError {
    /// What is wrong with the glob.
    pub message: String,
}

/// A compiled glob over workspace-relative, `'/'`-separated paths.
///
/// Syntax is globset's, with `literal_separator(true)`: `*`, `?` and `[..]` never match `/`, while `**`
/// spans any number of components (`src/**/*.rs`). A glob that contains no `/` at all (such as `*.rs` or
/// `Cargo.toml`) is matched against the last component of the path, so it selects matching names at any
/// depth, as in `.gitignore`. A glob with a `/` is matched against the whole relative path.
#[derive(Debug, Clone)]
pub struct GlobFilter {
    matcher: GlobMatcher,
    basename_only: bool,
}

impl GlobFilter {
    /// Compiles `glob`.
    pub fn new(glob: &str) -> Result<GlobFilter, GlobError> {
        let compiled = GlobBuilder::new(glob)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| GlobError {
                message: e.kind().to_string(),
            })?;
        Ok(GlobFilter {
            matcher: compiled.compile_matcher(),
            basename_only: !glob.contains('/'),
        })
    }

    /// Whether the relative path `rel` matches.
    pub fn is_match(&self, rel: &str) -> bool {
        if self.basename_only {
            let name = rel.rsplit('/').next().unwrap_or(rel);
            self.matcher.is_match(name)
        } else {
            self.matcher.is_match(rel)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_stays_in_one_component() {
        let g = GlobFilter::new("src/*.rs").unwrap();
        assert!(g.is_match("src/main.rs"));
        assert!(!g.is_match("src/a/b.rs"));
    }

    #[test]
    fn double_star_crosses() {
        let g = GlobFilter::new("src/**/*.rs").unwrap();
        assert!(g.is_match("src/a/b/c.rs"));
        assert!(g.is_match("src/c.rs"));
        assert!(!g.is_match("tests/c.rs"));
    }

    #[test]
    fn slashless_glob_matches_basename_at_any_depth() {
        let g = GlobFilter::new("*.rs").unwrap();
        assert!(g.is_match("main.rs"));
        assert!(g.is_match("a/b/lib.rs"));
        assert!(!g.is_match("a/b/lib.rs.bak"));
        assert!(!g.is_match("rs/readme"));
        let exact = GlobFilter::new("Cargo.toml").unwrap();
        assert!(exact.is_match("runner/fs/Cargo.toml"));
    }

    #[test]
    fn invalid_glob_is_an_error() {
        let err = GlobFilter::new("a/[b").unwrap_err();
        assert!(err.to_string().starts_with("invalid glob"));
    }
}
