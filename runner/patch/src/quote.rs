//! Quoting of user text inside error messages, truncated so messages stay short.

/// Longest quoted text, in characters, before it is cut with an ellipsis.
const MAX_CHARS: usize = 100;

/// `s` in single quotes, cut to [`MAX_CHARS`] characters with a trailing `…` when longer.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_CHARS * 4) + 4);
    out.push('\'');
    let mut chars = s.chars();
    out.extend(chars.by_ref().take(MAX_CHARS));
    if chars.next().is_some() {
        out.push('…');
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_quoted_verbatim() {
        assert_eq!(quote("abc"), "'abc'");
    }

    #[test]
    fn long_text_is_truncated_on_a_char_boundary() {
        let long = "é".repeat(150);
        let q = quote(&long);
        assert_eq!(q.chars().count(), MAX_CHARS + 3);
        assert!(q.ends_with("…'"));
    }
}
