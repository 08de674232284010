//! Turns raw patch text into numbered lines: strips `\r`, trims blank edges, unwraps a heredoc.

use crate::error::ParseError;
use crate::quote::quote;

/// First line of every patch (a heredoc's body is recognised by it).
pub(crate) const BEGIN: &str = "*** Begin Patch";

/// One line of the patch text, without its line terminator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SrcLine<'a> {
    /// 1-based line number in the original text.
    pub no: usize,
    /// The line text, with a trailing `\r` removed.
    pub text: &'a str,
}

/// The meaningful lines of `patch`: blank lines at both ends dropped and a heredoc wrapper
/// (`<<EOF`, `<<'EOF'`, `<<"EOF"`, optionally after `apply_patch`) removed.
pub(crate) fn prepare(patch: &str) -> Result<Vec<SrcLine<'_>>, ParseError> {
    let all: Vec<SrcLine<'_>> = patch
        .split('\n')
        .enumerate()
        .map(|(i, text)| SrcLine {
            no: i.saturating_add(1),
            text: text.strip_suffix('\r').unwrap_or(text),
        })
        .collect();
    let lines = trim_blank_edges(&all);
    let (Some(first), Some(last)) = (lines.first(), lines.last()) else {
        return Err(ParseError {
            line: 1,
            message: "expected '*** Begin Patch', found an empty patch".into(),
        });
    };
    if first.text.trim() == BEGIN {
        return Ok(lines.to_vec());
    }
    let Some(delimiter) = heredoc_delimiter(first.text) else {
        return Ok(lines.to_vec());
    };
    if lines.len() < 2 || last.text.trim() != delimiter {
        let found = if lines.len() < 2 {
            "the end of the input".to_string()
        } else {
            quote(last.text)
        };
        return Err(ParseError {
            line: if lines.len() < 2 {
                first.no.saturating_add(1)
            } else {
                last.no
            },
            message: format!(
                "expected the heredoc terminator '{delimiter}' as the last line, found {found}"
            ),
        });
    }
    let inner = lines
        .get(1..lines.len().saturating_sub(1))
        .unwrap_or_default();
    let inner = trim_blank_edges(inner);
    if inner.is_empty() {
        return Err(ParseError {
            line: last.no,
            message: format!(
                "expected '*** Begin Patch', found the heredoc terminator '{delimiter}'"
            ),
        });
    }
    Ok(inner.to_vec())
}

/// `lines` without whitespace-only lines at the start and end.
fn trim_blank_edges<'s, 'a>(lines: &'s [SrcLine<'a>]) -> &'s [SrcLine<'a>] {
    let start = lines
        .iter()
        .position(|l| !l.text.trim().is_empty())
        .unwrap_or(lines.len());
    let end = lines
        .iter()
        .rposition(|l| !l.text.trim().is_empty())
        .map_or(start, |i| i.saturating_add(1));
    lines.get(start..end).unwrap_or_default()
}

/// The delimiter word when `line` opens a heredoc: `[apply_patch|applypatch] <<WORD`,
/// `<<'WORD'` or `<<"WORD"`. Mismatched quotes are not a heredoc.
fn heredoc_delimiter(line: &str) -> Option<&str> {
    let mut rest = line.trim();
    for command in ["apply_patch", "applypatch"] {
        if let Some(after) = rest.strip_prefix(command)
            && after.starts_with(char::is_whitespace)
        {
            rest = after.trim_start();
            break;
        }
    }
    let rest = rest.strip_prefix("<<")?.trim_start();
    let word = match rest.chars().next()? {
        q @ ('\'' | '"') => rest.strip_prefix(q)?.strip_suffix(q)?,
        _ => rest,
    };
    let is_word = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    is_word.then_some(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(patch: &str) -> Vec<(usize, String)> {
        prepare(patch)
            .unwrap()
            .into_iter()
            .map(|l| (l.no, l.text.to_string()))
            .collect()
    }

    #[test]
    fn strips_carriage_returns_and_numbers_lines() {
        assert_eq!(
            texts("a\r\nb\r\n"),
            vec![(1, "a".to_string()), (2, "b".to_string())]
        );
    }

    #[test]
    fn blank_edges_are_dropped_but_numbering_is_kept() {
        assert_eq!(
            texts("\n  \n*** Begin Patch\nx\n\n"),
            vec![(3, "*** Begin Patch".to_string()), (4, "x".to_string())]
        );
    }

    #[test]
    fn empty_input_is_an_error_on_line_1() {
        let e = prepare(" \n\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.message.contains("empty patch"), "{e}");
    }

    #[test]
    fn heredoc_forms_are_unwrapped() {
        for opener in [
            "<<EOF",
            "<<'EOF'",
            "<<\"EOF\"",
            "apply_patch <<'EOF'",
            "applypatch <<EOF",
        ] {
            let text = format!("{opener}\n*** Begin Patch\n*** End Patch\nEOF\n");
            assert_eq!(
                texts(&text),
                vec![
                    (2, "*** Begin Patch".to_string()),
                    (3, "*** End Patch".to_string())
                ],
                "{opener}"
            );
        }
    }

    #[test]
    fn heredoc_with_other_delimiter_word() {
        assert_eq!(
            texts("<<'PATCH'\n*** Begin Patch\nPATCH").len(),
            1,
            "only the Begin line remains"
        );
    }

    #[test]
    fn mismatched_quotes_are_not_a_heredoc() {
        assert_eq!(heredoc_delimiter("<<\"EOF'"), None);
        assert_eq!(heredoc_delimiter("<<'EOF"), None);
        assert_eq!(heredoc_delimiter("<<"), None);
        assert_eq!(heredoc_delimiter("cat <<EOF"), None);
    }

    #[test]
    fn heredoc_without_terminator_reports_last_line() {
        let e = prepare("<<EOF\n*** Begin Patch\n*** End Patch\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert_eq!(
            e.message,
            "expected the heredoc terminator 'EOF' as the last line, found '*** End Patch'"
        );
    }

    #[test]
    fn heredoc_opener_alone_reports_end_of_input() {
        let e = prepare("<<EOF").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("found the end of the input"), "{e}");
    }

    #[test]
    fn empty_heredoc_reports_terminator_line() {
        let e = prepare("<<EOF\n\nEOF").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.starts_with("expected '*** Begin Patch'"), "{e}");
    }
}
