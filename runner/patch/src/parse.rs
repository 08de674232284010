//! The V4A grammar: turns prepared patch lines into [`Patch`] hunks and chunks.

use crate::error::ParseError;
use crate::model::{Chunk, Hunk, Patch};
use crate::quote::quote;
use crate::source::{BEGIN, SrcLine, prepare};

/// Last line of every patch.
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File:";
const DELETE: &str = "*** Delete File:";
const UPDATE: &str = "*** Update File:";
const MOVE_TO: &str = "*** Move to:";
const END_OF_FILE: &str = "*** End of File";
const HEADERS: &str = "a hunk header ('*** Add File: <path>', '*** Delete File: <path>' or '*** Update File: <path>')";

/// Parses V4A patch text (optionally CRLF, whitespace-padded markers, heredoc-wrapped).
///
/// Errors carry the 1-based line number in `patch` of the offending line.
pub fn parse(patch: &str) -> Result<Patch, ParseError> {
    let lines = prepare(patch)?;
    let Some(first) = lines.first() else {
        return Err(err(1, "expected '*** Begin Patch', found an empty patch"));
    };
    if first.text.trim() != BEGIN {
        return Err(err(
            first.no,
            format!("expected '{BEGIN}', found {}", quote(first.text)),
        ));
    }
    let last = match lines.get(1..) {
        Some([.., last]) => *last,
        _ => {
            return Err(err(
                first.no.saturating_add(1),
                format!("expected '{END}', found the end of the input"),
            ));
        }
    };
    if last.text.trim() != END {
        return Err(err(
            last.no,
            format!(
                "expected '{END}' as the last line, found {}",
                quote(last.text)
            ),
        ));
    }
    let body = lines
        .get(1..lines.len().saturating_sub(1))
        .unwrap_or_default();
    let hunks = Parser { body, end: last }.hunks()?;
    if hunks.is_empty() {
        return Err(err(
            last.no,
            format!("expected at least one hunk: {HEADERS}, found '{END}'"),
        ));
    }
    Ok(Patch { hunks })
}

fn err(line: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        line,
        message: message.into(),
    }
}

/// Cursor-free parser over the body lines (between Begin and End).
struct Parser<'s, 'a> {
    body: &'s [SrcLine<'a>],
    /// The `*** End Patch` line, reported when the body runs out.
    end: SrcLine<'a>,
}

impl Parser<'_, '_> {
    /// The line at `i`, or the End Patch line past the body.
    fn at(&self, i: usize) -> SrcLine<'_> {
        self.body.get(i).copied().unwrap_or(self.end)
    }

    fn hunks(&self) -> Result<Vec<Hunk>, ParseError> {
        let mut hunks = Vec::new();
        let mut i = 0;
        while let Some(line) = self.body.get(i) {
            let t = line.text.trim();
            if t.is_empty() {
                i += 1;
            } else if let Some(rest) = t.strip_prefix(ADD) {
                let path = header_path(rest, ADD, line)?;
                let mut contents = String::new();
                i += 1;
                while let Some(added) = self.body.get(i).and_then(|l| l.text.strip_prefix('+')) {
                    contents.push_str(added);
                    contents.push('\n');
                    i += 1;
                }
                hunks.push(Hunk::Add { path, contents });
            } else if let Some(rest) = t.strip_prefix(DELETE) {
                let path = header_path(rest, DELETE, line)?;
                hunks.push(Hunk::Delete { path });
                i += 1;
            } else if let Some(rest) = t.strip_prefix(UPDATE) {
                let path = header_path(rest, UPDATE, line)?;
                let (hunk, next) = self.update(i, path)?;
                hunks.push(hunk);
                i = next;
            } else {
                return Err(err(line.no, header_expected(t)));
            }
        }
        Ok(hunks)
    }

    /// Parses the Update hunk whose header is at `header`; returns it and the next body index.
    fn update(&self, header: usize, path: String) -> Result<(Hunk, usize), ParseError> {
        let header_no = self.at(header).no;
        let mut i = header.saturating_add(1);
        let mut move_to = None;
        if let Some(line) = self.body.get(i)
            && let Some(rest) = line.text.trim().strip_prefix(MOVE_TO)
        {
            move_to = Some(header_path(rest, MOVE_TO, line)?);
            i += 1;
        }
        let mut chunks: Vec<Chunk> = Vec::new();
        let mut current: Option<Building> = None;
        let mut after_eof = false;
        let mut has_change = false;
        while let Some(line) = self.body.get(i) {
            let text = line.text;
            let trimmed = text.trim_end();
            if trimmed == "@@" || trimmed.starts_with("@@ ") {
                if let Some(done) = current.take() {
                    chunks.push(done.finish(line)?);
                }
                let context = trimmed.strip_prefix("@@ ").map(str::to_string);
                current = Some(Building::new(context, line.no));
                after_eof = false;
            } else if trimmed == END_OF_FILE {
                let Some(mut done) = current.take() else {
                    return Err(err(
                        line.no,
                        format!(
                            "expected '@@' or a ' ', '+' or '-' line before '{END_OF_FILE}', found '{END_OF_FILE}'"
                        ),
                    ));
                };
                done.chunk.is_end_of_file = true;
                chunks.push(done.finish(line)?);
                after_eof = true;
            } else if trimmed.starts_with("***") {
                break;
            } else if trimmed.is_empty() && !text.starts_with(' ') {
                // A truly empty line: an empty context line inside a chunk; ignored before the
                // first chunk and after `*** End of File`.
                if let Some(building) = current.as_mut() {
                    building.push(' ', "");
                }
            } else {
                let mut chars = text.chars();
                let kind = chars.next().unwrap_or(' ');
                if !matches!(kind, ' ' | '+' | '-') {
                    return Err(err(
                        line.no,
                        format!(
                            "expected a line starting with ' ' (context), '+' (add), '-' (remove) or '@@' in the Update File hunk for {}, found {}",
                            quote(&path),
                            quote(text)
                        ),
                    ));
                }
                if current.is_none() {
                    if after_eof {
                        return Err(err(
                            line.no,
                            format!(
                                "expected '@@' to start a new chunk after '{END_OF_FILE}', found {}",
                                quote(text)
                            ),
                        ));
                    }
                    current = Some(Building::new(None, line.no));
                }
                if let Some(building) = current.as_mut() {
                    building.push(kind, chars.as_str());
                }
                has_change |= kind != ' ';
            }
            i += 1;
        }
        if let Some(done) = current.take() {
            chunks.push(done.finish(&self.at(i))?);
        }
        if move_to.is_none() {
            if chunks.is_empty() {
                let found = self.at(i);
                return Err(err(
                    found.no,
                    format!(
                        "expected '@@' or a ' ', '+' or '-' line in the Update File hunk for {}, found {}",
                        quote(&path),
                        quote(found.text.trim())
                    ),
                ));
            }
            if !has_change {
                return Err(err(
                    header_no,
                    format!(
                        "expected at least one '+' or '-' line in the Update File hunk for {}, found only context lines",
                        quote(&path)
                    ),
                ));
            }
        }
        Ok((
            Hunk::Update {
                path,
                move_to,
                chunks,
            },
            i,
        ))
    }
}

/// A chunk being collected.
struct Building {
    chunk: Chunk,
    /// Line of its `@@` (or first diff line), for error messages.
    start: usize,
    has_lines: bool,
}

impl Building {
    fn new(context: Option<String>, start: usize) -> Self {
        Building {
            chunk: Chunk {
                context,
                ..Chunk::default()
            },
            start,
            has_lines: false,
        }
    }

    fn push(&mut self, kind: char, text: &str) {
        self.has_lines = true;
        if kind != '+' {
            self.chunk.old_lines.push(text.to_string());
        }
        if kind != '-' {
            self.chunk.new_lines.push(text.to_string());
        }
    }

    /// The finished chunk; `next` is the line that ended it (reported when the chunk is empty).
    fn finish(self, next: &SrcLine<'_>) -> Result<Chunk, ParseError> {
        if !self.has_lines {
            return Err(err(
                next.no,
                format!(
                    "expected a ' ', '+' or '-' line after the '@@' on line {}, found {}",
                    self.start,
                    quote(next.text.trim())
                ),
            ));
        }
        Ok(self.chunk)
    }
}

/// The path after a header marker, trimmed; an empty path is an error.
fn header_path(rest: &str, marker: &str, line: &SrcLine<'_>) -> Result<String, ParseError> {
    let path = rest.trim();
    if path.is_empty() {
        return Err(err(
            line.no,
            format!("expected a path after '{marker}', found the end of the line"),
        ));
    }
    Ok(path.to_string())
}

/// Message for a line found where a hunk header was expected.
fn header_expected(found: &str) -> String {
    if found.starts_with(MOVE_TO) {
        format!(
            "expected {HEADERS}, found {} ('{MOVE_TO}' must directly follow its '*** Update File:' line)",
            quote(found)
        )
    } else if found == END {
        format!("expected {HEADERS}, found a '{END}' that is not the last line")
    } else {
        format!("expected {HEADERS}, found {}", quote(found))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(ctx: Option<&str>, old: &[&str], new: &[&str], eof: bool) -> Chunk {
        Chunk {
            context: ctx.map(str::to_string),
            old_lines: old.iter().map(|s| s.to_string()).collect(),
            new_lines: new.iter().map(|s| s.to_string()).collect(),
            is_end_of_file: eof,
        }
    }

    fn update(path: &str, move_to: Option<&str>, chunks: Vec<Chunk>) -> Hunk {
        Hunk::Update {
            path: path.into(),
            move_to: move_to.map(str::to_string),
            chunks,
        }
    }

    fn parse_err(text: &str) -> ParseError {
        parse(text).expect_err("patch should be rejected")
    }

    #[test]
    fn add_file_collects_plus_lines_with_newlines() {
        let p = parse("*** Begin Patch\n*** Add File: a/b.txt\n+one\n+\n+three\n*** End Patch\n")
            .unwrap();
        assert_eq!(
            p.hunks,
            vec![Hunk::Add {
                path: "a/b.txt".into(),
                contents: "one\n\nthree\n".into()
            }]
        );
    }

    #[test]
    fn add_file_without_lines_is_empty() {
        let p = parse("*** Begin Patch\n*** Add File: e\n*** End Patch").unwrap();
        assert_eq!(
            p.hunks,
            vec![Hunk::Add {
                path: "e".into(),
                contents: String::new()
            }]
        );
    }

    #[test]
    fn delete_file() {
        let p = parse("*** Begin Patch\n*** Delete File: gone.txt\n*** End Patch").unwrap();
        assert_eq!(
            p.hunks,
            vec![Hunk::Delete {
                path: "gone.txt".into()
            }]
        );
    }

    #[test]
    fn update_with_move_and_context_chunks() {
        let text = "*** Begin Patch\n*** Update File: a.rs\n*** Move to: b.rs\n@@ fn main() {\n     let x = 1;\n-    old();\n+    new();\n@@\n-tail\n+TAIL\n*** End Patch";
        let p = parse(text).unwrap();
        assert_eq!(
            p.hunks,
            vec![update(
                "a.rs",
                Some("b.rs"),
                vec![
                    chunk(
                        Some("fn main() {"),
                        &["    let x = 1;", "    old();"],
                        &["    let x = 1;", "    new();"],
                        false
                    ),
                    chunk(None, &["tail"], &["TAIL"], false),
                ]
            )]
        );
    }

    #[test]
    fn first_chunk_may_omit_the_at_at_line() {
        let p = parse("*** Begin Patch\n*** Update File: f\n-a\n+b\n*** End Patch").unwrap();
        assert_eq!(
            p.hunks,
            vec![update("f", None, vec![chunk(None, &["a"], &["b"], false)])]
        );
    }

    #[test]
    fn end_of_file_marks_the_chunk() {
        let p = parse(
            "*** Begin Patch\n*** Update File: f\n@@\n x\n-y\n+z\n*** End of File\n\n@@\n-q\n+r\n*** End Patch",
        )
        .unwrap();
        assert_eq!(
            p.hunks,
            vec![update(
                "f",
                None,
                vec![
                    chunk(None, &["x", "y"], &["x", "z"], true),
                    chunk(None, &["q"], &["r"], false)
                ]
            )]
        );
    }

    #[test]
    fn empty_line_inside_a_chunk_is_empty_context() {
        let p =
            parse("*** Begin Patch\n*** Update File: f\n@@\n a\n\n-b\n+c\n*** End Patch").unwrap();
        assert_eq!(
            p.hunks,
            vec![update(
                "f",
                None,
                vec![chunk(None, &["a", "", "b"], &["a", "", "c"], false)]
            )]
        );
    }

    #[test]
    fn crlf_patch_parses_like_lf() {
        let lf = "*** Begin Patch\n*** Update File: f\n@@ ctx\n-a\n+b\n*** Add File: n\n+x\n*** End Patch\n";
        let crlf = lf.replace('\n', "\r\n");
        assert_eq!(parse(&crlf).unwrap(), parse(lf).unwrap());
    }

    #[test]
    fn padded_markers_and_headers_are_accepted() {
        // Outside an Update hunk headers are matched fully trimmed; inside one only trailing
        // whitespace is ignored (a leading space makes a context line).
        let p = parse(" *** Begin Patch \n  *** Update File: f  \n@@\n-a\n+b\n*** Delete File: g \n   *** Add File: h\t\n+x\n *** End Patch ")
            .unwrap();
        assert_eq!(
            p.hunks,
            vec![
                update("f", None, vec![chunk(None, &["a"], &["b"], false)]),
                Hunk::Delete { path: "g".into() },
                Hunk::Add {
                    path: "h".into(),
                    contents: "x\n".into()
                }
            ]
        );
    }

    #[test]
    fn heredoc_wrapped_patch_parses() {
        let p =
            parse("apply_patch <<'EOF'\n*** Begin Patch\n*** Delete File: x\n*** End Patch\nEOF\n")
                .unwrap();
        assert_eq!(p.hunks, vec![Hunk::Delete { path: "x".into() }]);
    }

    #[test]
    fn blank_lines_between_hunks_are_ignored_after_add_and_delete() {
        let p =
            parse("*** Begin Patch\n*** Add File: a\n+x\n\n*** Delete File: b\n\n*** End Patch")
                .unwrap();
        assert_eq!(p.hunks.len(), 2);
    }

    #[test]
    fn indented_header_inside_update_is_a_context_line() {
        let p = parse(
            "*** Begin Patch\n*** Update File: f\n@@\n *** Add File: x\n-a\n+b\n*** End Patch",
        )
        .unwrap();
        assert_eq!(
            p.hunks,
            vec![update(
                "f",
                None,
                vec![chunk(
                    None,
                    &["*** Add File: x", "a"],
                    &["*** Add File: x", "b"],
                    false
                )]
            )]
        );
    }

    #[test]
    fn pure_rename_is_allowed() {
        let p =
            parse("*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** End Patch").unwrap();
        assert_eq!(p.hunks, vec![update("a", Some("b"), vec![])]);
    }

    #[test]
    fn missing_begin_is_line_1() {
        let e = parse_err("*** Update File: f\n*** End Patch");
        assert_eq!(e.line, 1);
        assert_eq!(
            e.message,
            "expected '*** Begin Patch', found '*** Update File: f'"
        );
    }

    #[test]
    fn missing_end_reports_the_last_line() {
        let e = parse_err("*** Begin Patch\n*** Delete File: a\n");
        assert_eq!(e.line, 2);
        assert_eq!(
            e.message,
            "expected '*** End Patch' as the last line, found '*** Delete File: a'"
        );
    }

    #[test]
    fn begin_alone_reports_end_of_input() {
        let e = parse_err("*** Begin Patch\n");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("found the end of the input"), "{e}");
    }

    #[test]
    fn empty_patch_is_rejected_at_the_end_line() {
        let e = parse_err("*** Begin Patch\n\n*** End Patch");
        assert_eq!(e.line, 3);
        assert!(e.message.starts_with("expected at least one hunk"), "{e}");
    }

    #[test]
    fn empty_input_is_rejected() {
        assert_eq!(parse_err("").line, 1);
    }

    #[test]
    fn invalid_hunk_header_reports_its_line() {
        let e = parse_err("*** Begin Patch\n*** Frobnicate File: foo\n*** End Patch");
        assert_eq!(e.line, 2);
        assert!(
            e.message.ends_with("found '*** Frobnicate File: foo'"),
            "{e}"
        );
    }

    #[test]
    fn line_numbers_count_leading_blank_and_heredoc_lines() {
        let e = parse_err("\n<<EOF\n*** Begin Patch\n*** Nope\n*** End Patch\nEOF");
        assert_eq!(e.line, 4);
    }

    #[test]
    fn update_without_chunks_is_rejected_where_the_chunk_was_expected() {
        let e = parse_err("*** Begin Patch\n*** Update File: foo.txt\n*** End Patch\n");
        assert_eq!(e.line, 3);
        assert_eq!(
            e.message,
            "expected '@@' or a ' ', '+' or '-' line in the Update File hunk for 'foo.txt', found '*** End Patch'"
        );
    }

    #[test]
    fn update_with_only_context_is_rejected_at_its_header() {
        let e = parse_err("*** Begin Patch\n*** Update File: f\n@@\n a\n b\n*** End Patch");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("found only context lines"), "{e}");
    }

    #[test]
    fn two_at_at_lines_in_a_row_are_rejected() {
        let e = parse_err("*** Begin Patch\n*** Update File: f\n@@ a\n@@ b\n-x\n*** End Patch");
        assert_eq!(e.line, 4);
        assert_eq!(
            e.message,
            "expected a ' ', '+' or '-' line after the '@@' on line 3, found '@@ b'"
        );
    }

    #[test]
    fn at_at_followed_by_end_patch_is_rejected() {
        let e = parse_err("*** Begin Patch\n*** Update File: f\n-a\n+b\n@@\n*** End Patch");
        assert_eq!(e.line, 6);
        assert!(e.message.contains("after the '@@' on line 5"), "{e}");
    }

    #[test]
    fn bad_line_in_update_hunk_is_rejected() {
        let e = parse_err(
            "*** Begin Patch\n*** Update File: f\n@@\n-a\nnot a diff line\n*** End Patch",
        );
        assert_eq!(e.line, 5);
        assert!(e.message.ends_with("found 'not a diff line'"), "{e}");
    }

    #[test]
    fn tab_indented_line_in_update_hunk_is_rejected() {
        let e = parse_err("*** Begin Patch\n*** Update File: f\n@@\n-a\n\tx\n*** End Patch");
        assert_eq!(e.line, 5);
    }

    #[test]
    fn diff_line_after_end_of_file_needs_a_new_at_at() {
        let e = parse_err(
            "*** Begin Patch\n*** Update File: f\n-a\n*** End of File\n-b\n*** End Patch",
        );
        assert_eq!(e.line, 5);
        assert_eq!(
            e.message,
            "expected '@@' to start a new chunk after '*** End of File', found '-b'"
        );
    }

    #[test]
    fn end_of_file_without_lines_is_rejected() {
        let e = parse_err("*** Begin Patch\n*** Update File: f\n*** End of File\n*** End Patch");
        assert_eq!(e.line, 3);
        let e =
            parse_err("*** Begin Patch\n*** Update File: f\n@@\n*** End of File\n*** End Patch");
        assert_eq!(e.line, 4);
    }

    #[test]
    fn move_to_after_chunks_is_rejected() {
        let e =
            parse_err("*** Begin Patch\n*** Update File: f\n-a\n+b\n*** Move to: g\n*** End Patch");
        assert_eq!(e.line, 5);
        assert!(e.message.contains("must directly follow"), "{e}");
    }

    #[test]
    fn end_patch_in_the_middle_is_rejected() {
        let e = parse_err(
            "*** Begin Patch\n*** Delete File: a\n*** End Patch\n*** Delete File: b\n*** End Patch",
        );
        assert_eq!(e.line, 3);
        assert!(e.message.contains("not the last line"), "{e}");
    }

    #[test]
    fn non_plus_line_in_add_hunk_is_rejected() {
        let e = parse_err("*** Begin Patch\n*** Add File: a\n+x\ny\n*** End Patch");
        assert_eq!(e.line, 4);
        assert!(e.message.ends_with("found 'y'"), "{e}");
    }

    #[test]
    fn header_without_path_is_rejected() {
        for header in ["*** Add File:", "*** Delete File:  ", "*** Update File:"] {
            let e = parse_err(&format!("*** Begin Patch\n{header}\n*** End Patch"));
            assert_eq!(e.line, 2, "{header}");
            assert!(e.message.contains("found the end of the line"), "{e}");
        }
        let e = parse_err("*** Begin Patch\n*** Update File: a\n*** Move to:\n-x\n*** End Patch");
        assert_eq!(e.line, 3);
    }

    #[test]
    fn trailing_garbage_after_end_patch_is_rejected() {
        let e = parse_err("*** Begin Patch\n*** Delete File: a\n*** End Patch\ntrailing");
        assert_eq!(e.line, 4);
    }
}
