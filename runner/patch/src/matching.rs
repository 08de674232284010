//! Locating lines in a file: four passes from exact to Unicode-normalised, first hit wins.

/// One way of comparing a file line with a patch line, strictest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Byte-for-byte equal.
    Exact,
    /// Equal once trailing whitespace is ignored.
    TrimEnd,
    /// Equal once leading and trailing whitespace are ignored.
    Trim,
    /// Trimmed, with typographic dashes, quotes and spaces folded to ASCII.
    Normalized,
}

/// All passes, in the order they are tried.
pub(crate) const PASSES: [Pass; 4] = [Pass::Exact, Pass::TrimEnd, Pass::Trim, Pass::Normalized];

impl Pass {
    /// Whether `file` and `patch` lines are equal under this pass.
    pub(crate) fn same(self, file: &str, patch: &str) -> bool {
        match self {
            Pass::Exact => file == patch,
            Pass::TrimEnd => file.trim_end() == patch.trim_end(),
            Pass::Trim => file.trim() == patch.trim(),
            Pass::Normalized => file
                .trim()
                .chars()
                .map(fold)
                .eq(patch.trim().chars().map(fold)),
        }
    }
}

/// Folds Unicode look-alikes to ASCII: dashes and minus to `-`, single quotes to `'`, double
/// quotes to `"`, non-breaking and other typographic spaces to a space.
pub(crate) fn fold(c: char) -> char {
    match c {
        '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
        '\u{2018}'..='\u{201B}' => '\'',
        '\u{201C}'..='\u{201F}' => '"',
        '\u{00A0}' | '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        other => other,
    }
}

/// Whether `pattern` matches `lines` starting at `pos` under `pass`.
pub(crate) fn matches_at<S: AsRef<str>>(
    lines: &[&str],
    pattern: &[S],
    pos: usize,
    pass: Pass,
) -> bool {
    lines
        .get(pos..pos.saturating_add(pattern.len()))
        .is_some_and(|window| {
            window
                .iter()
                .zip(pattern)
                .all(|(file, want)| pass.same(file, want.as_ref()))
        })
}

/// First index `>= start` where `pattern` occurs in `lines`.
///
/// Each pass scans every position before a looser pass is tried. With `eof`, the position that
/// puts the pattern at the very end of the file is tried first (all passes), then the ordinary
/// forward search. An empty pattern matches at `start`.
pub(crate) fn seek<S: AsRef<str>>(
    lines: &[&str],
    pattern: &[S],
    start: usize,
    eof: bool,
) -> Option<usize> {
    if pattern.is_empty() {
        return (start <= lines.len()).then_some(start);
    }
    let last = lines.len().checked_sub(pattern.len())?;
    if eof
        && last >= start
        && PASSES
            .iter()
            .any(|pass| matches_at(lines, pattern, last, *pass))
    {
        return Some(last);
    }
    PASSES
        .iter()
        .find_map(|pass| (start..=last).find(|pos| matches_at(lines, pattern, *pos, *pass)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_pass_wins_over_earlier_loose_match() {
        // Line 0 matches only loosely, line 1 exactly: the exact pass scans all positions first.
        let lines = ["foo  ", "foo"];
        assert_eq!(seek(&lines, &["foo"], 0, false), Some(1));
    }

    #[test]
    fn trailing_whitespace_pass() {
        assert!(!Pass::Exact.same("x = 1;   ", "x = 1;"));
        assert!(Pass::TrimEnd.same("x = 1;   ", "x = 1;\t"));
        assert!(!Pass::TrimEnd.same("  x", "x"));
        assert_eq!(seek(&["a", "b \t"], &["b"], 0, false), Some(1));
    }

    #[test]
    fn trim_pass_ignores_indentation() {
        assert!(Pass::Trim.same("        return x;", "    return x;"));
        assert!(!Pass::Trim.same("return  x;", "return x;"));
        assert_eq!(
            seek(&["\tif a {", "\t\tb();"], &["if a {", "    b();"], 0, false),
            Some(0)
        );
    }

    #[test]
    fn normalized_pass_folds_look_alikes() {
        assert!(Pass::Normalized.same("let s = “hi” – ‘x’;", "let s = \"hi\" - 'x';"));
        assert!(Pass::Normalized.same("a\u{00A0}b\u{3000}c", "a b c"));
        assert!(Pass::Normalized.same("x \u{2212} y", "x - y"));
        assert!(!Pass::Trim.same("“hi”", "\"hi\""));
        assert!(!Pass::Normalized.same("a-b", "a_b"));
    }

    #[test]
    fn fold_covers_every_listed_character() {
        for c in ['‐', '‑', '‒', '–', '—', '―', '−'] {
            assert_eq!(fold(c), '-', "{c:?}");
        }
        for c in ['‘', '’', '‚', '‛'] {
            assert_eq!(fold(c), '\'', "{c:?}");
        }
        for c in ['“', '”', '„', '‟'] {
            assert_eq!(fold(c), '"', "{c:?}");
        }
        for c in [
            '\u{00A0}', '\u{2002}', '\u{2009}', '\u{200A}', '\u{202F}', '\u{205F}', '\u{3000}',
        ] {
            assert_eq!(fold(c), ' ', "{c:?}");
        }
        assert_eq!(fold('a'), 'a');
    }

    #[test]
    fn search_starts_at_the_cursor() {
        let lines = ["x", "y", "x", "y"];
        assert_eq!(seek(&lines, &["x", "y"], 0, false), Some(0));
        assert_eq!(seek(&lines, &["x", "y"], 1, false), Some(2));
        assert_eq!(seek(&lines, &["x", "y"], 3, false), None);
    }

    #[test]
    fn eof_tries_the_end_first_then_falls_back() {
        let lines = ["x", "y", "x"];
        assert_eq!(seek(&lines, &["x"], 0, true), Some(2));
        assert_eq!(seek(&lines, &["y"], 0, true), Some(1));
        assert_eq!(seek(&lines, &["x"], 0, false), Some(0));
    }

    #[test]
    fn eof_position_before_cursor_is_not_used() {
        let lines = ["a", "b"];
        assert_eq!(seek(&lines, &["a", "b"], 1, true), None);
    }

    #[test]
    fn empty_pattern_and_too_long_pattern() {
        let lines = ["a"];
        let empty: [&str; 0] = [];
        assert_eq!(seek(&lines, &empty, 1, false), Some(1));
        assert_eq!(seek(&lines, &empty, 2, false), None);
        assert_eq!(seek(&lines, &["a", "b"], 0, false), None);
        assert_eq!(seek(&[], &["a"], 0, true), None);
    }
}
