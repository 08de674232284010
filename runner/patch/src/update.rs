//! Applies an Update hunk's chunks to a file's text, keeping each untouched line's bytes.

use crate::align::align;
use crate::matching::{PASSES, Pass, seek};
use crate::model::Chunk;
use crate::quote::quote;
use crate::text::{self, Ending, Line};

/// Most pattern lines quoted in a "not found" message.
const MAX_QUOTED_LINES: usize = 8;

/// One planned replacement: `old_len` file lines at `start` become `new`.
struct Edit<'c> {
    start: usize,
    old: &'c [String],
    new: &'c [String],
}

/// The new bytes of `path` (text `src`) after applying `chunks`, or an error message.
pub(crate) fn apply(path: &str, src: &str, chunks: &[Chunk]) -> Result<Vec<u8>, String> {
    let file = text::split(src);
    let lines: Vec<&str> = file.lines.iter().map(|l| l.text).collect();
    let total = chunks.len();
    let mut cursor = 0usize;
    let mut edits: Vec<Edit<'_>> = Vec::with_capacity(total);
    for (index, chunk) in chunks.iter().enumerate() {
        let label = ChunkLabel {
            path,
            number: index.saturating_add(1),
            total,
        };
        let mut anchor = None;
        if let Some(context) = &chunk.context {
            let at = seek(&lines, std::slice::from_ref(context), cursor, false)
                .ok_or_else(|| context_missing(&label, context, &lines, cursor))?;
            anchor = Some(at);
            cursor = at.saturating_add(1);
        }
        if chunk.old_lines.is_empty() {
            let at = match anchor {
                Some(_) if !chunk.is_end_of_file => cursor,
                _ => lines.len(),
            };
            edits.push(Edit {
                start: at,
                old: &[],
                new: &chunk.new_lines,
            });
            cursor = at;
            continue;
        }
        let edit = locate(&lines, chunk, cursor, anchor)
            .ok_or_else(|| lines_missing(&label, chunk, &lines, cursor))?;
        cursor = edit.start.saturating_add(edit.old.len());
        edits.push(edit);
    }
    assemble(&file, &edits).ok_or_else(|| {
        format!(
            "chunks of the Update for {} overlap each other",
            quote(path)
        )
    })
}

/// Finds where a chunk with old lines applies.
fn locate<'c>(
    lines: &[&str],
    chunk: &'c Chunk,
    cursor: usize,
    anchor: Option<usize>,
) -> Option<Edit<'c>> {
    let eof = chunk.is_end_of_file;
    let (old, new) = (chunk.old_lines.as_slice(), chunk.new_lines.as_slice());
    if let Some(start) = seek(lines, old, cursor, eof) {
        return Some(Edit { start, old, new });
    }
    // The chunk repeats its `@@` line as its first context line: search from the anchor itself.
    if let (Some(at), Some(context), Some(first)) = (anchor, &chunk.context, old.first())
        && PASSES.iter().any(|p| p.same(first, context))
        && let Some(start) = seek(lines, old, at, eof)
    {
        return Some(Edit { start, old, new });
    }
    // A trailing empty context line (often a blank line before the next header) may be absent.
    if let Some((last, shorter)) = old.split_last()
        && last.is_empty()
        && !shorter.is_empty()
        && let Some(start) = seek(lines, shorter, cursor, eof)
    {
        let new = match new.split_last() {
            Some((l, rest)) if l.is_empty() => rest,
            _ => new,
        };
        return Some(Edit {
            start,
            old: shorter,
            new,
        });
    }
    None
}

/// Builds the new file bytes; `None` if edits are out of order (never expected).
fn assemble(file: &text::Text<'_>, edits: &[Edit<'_>]) -> Option<Vec<u8>> {
    let mut out: Vec<(&str, Ending)> = Vec::with_capacity(file.lines.len());
    let mut pos = 0usize;
    for edit in edits {
        keep(&mut out, file.lines.get(pos..edit.start)?);
        let end = edit.start.checked_add(edit.old.len())?;
        let region = file.lines.get(edit.start..end)?;
        for (new_line, pair) in edit.new.iter().zip(align(edit.old, edit.new)) {
            match pair.and_then(|o| region.get(o)) {
                Some(original) => out.push((original.text, original.ending)),
                None => out.push((new_line.as_str(), file.dominant)),
            }
        }
        pos = end;
    }
    keep(&mut out, file.lines.get(pos..)?);
    Some(text::render(file.bom, out, file.dominant))
}

/// Appends untouched file lines with their own terminators.
fn keep<'a>(out: &mut Vec<(&'a str, Ending)>, slice: &[Line<'a>]) {
    out.extend(slice.iter().map(|l| (l.text, l.ending)));
}

/// Names a chunk in messages.
struct ChunkLabel<'a> {
    path: &'a str,
    number: usize,
    total: usize,
}

impl std::fmt::Display for ChunkLabel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (chunk {} of {})",
            quote(self.path),
            self.number,
            self.total
        )
    }
}

fn context_missing(label: &ChunkLabel<'_>, context: &str, lines: &[&str], cursor: usize) -> String {
    let mut msg = format!(
        "could not find the '@@' context line {} in {label}",
        quote(context)
    );
    if cursor > 0 {
        msg.push_str(&format!(" after line {cursor}"));
        if let Some(at) = seek(lines, std::slice::from_ref(&context), 0, false) {
            msg.push_str(&format!(
                "; it occurs at line {}, before the previous chunk (chunks must be in file order)",
                at.saturating_add(1)
            ));
        }
    }
    msg
}

fn lines_missing(label: &ChunkLabel<'_>, chunk: &Chunk, lines: &[&str], cursor: usize) -> String {
    let old = &chunk.old_lines;
    let mut msg = format!("could not find the expected lines in {label}");
    if cursor > 0 {
        msg.push_str(&format!(" at or after line {}", cursor.saturating_add(1)));
    }
    msg.push_str(":\n");
    for line in old.iter().take(MAX_QUOTED_LINES) {
        msg.push_str(&format!("  {}\n", quote(line)));
    }
    if old.len() > MAX_QUOTED_LINES {
        msg.push_str(&format!(
            "  … and {} more line(s)\n",
            old.len() - MAX_QUOTED_LINES
        ));
    }
    if cursor > 0
        && let Some(at) = seek(lines, old, 0, false)
    {
        msg.push_str(&format!(
            "These lines occur at line {}, before the previous chunk's match (chunks must be in file order).",
            at.saturating_add(1)
        ));
        return msg;
    }
    match closest(lines, old, cursor) {
        Some((at, matched)) => {
            let expected = old.get(matched).map_or(String::new(), |l| quote(l));
            let found = lines
                .get(at.saturating_add(matched))
                .map_or_else(|| "the end of the file".to_string(), |l| quote(l));
            msg.push_str(&format!(
                "Closest match: line {} starts the first {matched} of {} expected line(s); then expected {expected}, found {found}.",
                at.saturating_add(1),
                old.len()
            ));
        }
        None => msg.push_str(&format!(
            "The first expected line {} does not occur in the file{}.",
            old.first().map_or(String::new(), |l| quote(l)),
            if cursor > 0 {
                " after the previous chunk"
            } else {
                ""
            }
        )),
    }
    msg
}

/// Line comparisons `closest` may spend before it settles for what it has found.
const CLOSEST_BUDGET: usize = 2_000_000;

/// The position from `cursor` on where the longest prefix of `old` matches (loosest pass), and
/// that prefix length; `None` when not even the first line matches.
fn closest(lines: &[&str], old: &[String], cursor: usize) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    let mut spent = 0usize;
    for pos in cursor..lines.len() {
        if spent > CLOSEST_BUDGET {
            break;
        }
        let matched = old
            .iter()
            .zip(lines.get(pos..).unwrap_or_default())
            .take_while(|(want, file)| Pass::Normalized.same(file, want))
            .count();
        spent = spent.saturating_add(matched).saturating_add(1);
        if matched > 0 && best.is_none_or(|(_, b)| matched > b) {
            best = Some((pos, matched));
        }
    }
    best
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

    fn run(src: &str, chunks: &[Chunk]) -> String {
        String::from_utf8(apply("f.txt", src, chunks).unwrap()).unwrap()
    }

    #[test]
    fn replaces_lines_and_keeps_the_rest() {
        let out = run("a\nb\nc\n", &[chunk(None, &["b"], &["B", "B2"], false)]);
        assert_eq!(out, "a\nB\nB2\nc\n");
    }

    #[test]
    fn context_header_selects_the_occurrence() {
        let src = "fn a() {\n  x();\n}\nfn b() {\n  x();\n}\n";
        let out = run(
            src,
            &[chunk(Some("fn b() {"), &["  x();"], &["  y();"], false)],
        );
        assert_eq!(out, "fn a() {\n  x();\n}\nfn b() {\n  y();\n}\n");
    }

    #[test]
    fn pure_addition_goes_after_its_context_line() {
        let out = run("a\nb\nc\n", &[chunk(Some("a"), &[], &["new"], false)]);
        assert_eq!(out, "a\nnew\nb\nc\n");
    }

    #[test]
    fn pure_addition_without_context_goes_to_eof() {
        let out = run("a\nb", &[chunk(None, &[], &["new"], false)]);
        assert_eq!(out, "a\nb\nnew\n");
    }

    #[test]
    fn pure_addition_with_context_and_eof_marker_goes_to_eof() {
        let out = run("a\nb\n", &[chunk(Some("a"), &[], &["new"], true)]);
        assert_eq!(out, "a\nb\nnew\n");
    }

    #[test]
    fn context_repeated_as_first_line_still_matches() {
        let out = run(
            "x\nfn f() {\n  1\n}\n",
            &[chunk(
                Some("fn f() {"),
                &["fn f() {", "  1"],
                &["fn f() {", "  2"],
                false,
            )],
        );
        assert_eq!(out, "x\nfn f() {\n  2\n}\n");
    }

    #[test]
    fn trailing_empty_context_line_is_optional() {
        let out = run("a\nb", &[chunk(None, &["b", ""], &["c", ""], false)]);
        assert_eq!(out, "a\nc\n");
    }

    #[test]
    fn lenient_match_keeps_the_file_bytes_of_context_lines() {
        let out = run(
            "    keep “this”  \nold\n",
            &[chunk(
                None,
                &["keep \"this\"", "old"],
                &["keep \"this\"", "new"],
                false,
            )],
        );
        assert_eq!(out, "    keep “this”  \nnew\n");
    }

    #[test]
    fn missing_lines_message_quotes_lines_and_closest_match() {
        let e = apply(
            "dir/f.txt",
            "a\nb\nc\n",
            &[chunk(None, &["a", "b", "x"], &["z"], false)],
        )
        .unwrap_err();
        assert!(e.starts_with("could not find the expected lines in 'dir/f.txt' (chunk 1 of 1):\n  'a'\n  'b'\n  'x'\n"), "{e}");
        assert!(e.contains("Closest match: line 1 starts the first 2 of 3 expected line(s); then expected 'x', found 'c'."), "{e}");
    }

    #[test]
    fn missing_lines_message_is_bounded() {
        let old: Vec<String> = (0..50).map(|i| format!("{}{i}", "q".repeat(300))).collect();
        let c = Chunk {
            old_lines: old,
            new_lines: vec![],
            ..Chunk::default()
        };
        let e = apply("f", "a\n", &[c]).unwrap_err();
        assert!(e.len() < 2000, "{}", e.len());
        assert!(e.contains("… and 42 more line(s)"), "{e}");
        assert!(e.contains("does not occur in the file"), "{e}");
    }

    #[test]
    fn out_of_order_chunk_is_explained() {
        let e = apply(
            "f",
            "a\nb\nc\n",
            &[
                chunk(None, &["c"], &["C"], false),
                chunk(None, &["a"], &["A"], false),
            ],
        )
        .unwrap_err();
        assert!(e.contains("(chunk 2 of 2) at or after line 4"), "{e}");
        assert!(
            e.contains("occur at line 1, before the previous chunk"),
            "{e}"
        );
    }

    #[test]
    fn missing_context_line_is_reported() {
        let e = apply("f", "a\n", &[chunk(Some("nope"), &["a"], &["b"], false)]).unwrap_err();
        assert_eq!(
            e,
            "could not find the '@@' context line 'nope' in 'f' (chunk 1 of 1)"
        );
    }
}
