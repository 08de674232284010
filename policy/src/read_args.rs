//! The argument rules of `read` (exactly one of `path`/`paths`, bounded paths, exclusive line
//! windows), checked before any request is built; `crate::request` re-exports them.

use crate::error::{ErrorCode, ToolError};

/// The argument rules of `read` (`INVALID_ARGUMENTS`): exactly one of `path`/`paths`, at most
/// [`READ_MAX_PATHS`] paths, `head_lines`/`tail_lines` positive and exclusive with each other and
/// with `offset`/`limit`.
pub fn check_read_args(p: &crate::wire::ReadParams) -> Result<(), ToolError> {
    use crate::wire::READ_MAX_PATHS;
    let bad = |m: String| Err(ToolError::new(ErrorCode::InvalidArguments, m));
    match &p.paths {
        Some(_) if p.path.is_some() => {
            return bad("`path` and `paths` are exclusive: send one".into());
        }
        Some(list) if list.is_empty() => return bad("`paths` must name at least one path".into()),
        Some(list) if list.len() > READ_MAX_PATHS => {
            return bad(format!(
                "`paths` names {} paths; at most {READ_MAX_PATHS}",
                list.len()
            ));
        }
        None if p.path.is_none() => return bad("`path` (or `paths`) is required".into()),
        _ => {}
    }
    let lines = match (p.head_lines, p.tail_lines) {
        (Some(_), Some(_)) => return bad("`head_lines` and `tail_lines` are exclusive".into()),
        (Some(n), None) | (None, Some(n)) => Some(n),
        (None, None) => None,
    };
    match lines {
        Some(0) => bad("`head_lines`/`tail_lines` must be at least 1".into()),
        Some(_) if p.offset.is_some() || p.limit.is_some() => {
            bad("`head_lines`/`tail_lines` are exclusive with `offset`/`limit`".into())
        }
        _ => Ok(()),
    }
}
