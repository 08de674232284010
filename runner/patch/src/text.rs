//! Splits file text into lines that remember their own terminator, and renders them back.
//!
//! A lone `\r` counts as a line terminator (classic Mac files and scenario 024), so CR-only files
//! are edited line by line and stay CR-only. A UTF-8 byte-order mark is kept aside and restored.

/// How one line ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// `\n`
    Lf,
    /// `\r\n`
    CrLf,
    /// a lone `\r`
    Cr,
    /// the last line of a file without a final terminator
    Missing,
}

impl Ending {
    fn as_str(self) -> &'static str {
        match self {
            Ending::Lf => "\n",
            Ending::CrLf => "\r\n",
            Ending::Cr => "\r",
            Ending::Missing => "",
        }
    }
}

/// One line: its text and its terminator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Line<'a> {
    pub text: &'a str,
    pub ending: Ending,
}

/// A file split into lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Text<'a> {
    /// The file started with a UTF-8 byte-order mark (not part of the first line).
    pub bom: bool,
    pub lines: Vec<Line<'a>>,
    /// The most common terminator (ties: the one seen first); `Lf` when there is none.
    pub dominant: Ending,
}

const BOM: char = '\u{feff}';

/// Splits `src` into lines.
pub(crate) fn split(src: &str) -> Text<'_> {
    let (bom, body) = match src.strip_prefix(BOM) {
        Some(rest) => (true, rest),
        None => (false, src),
    };
    let mut lines = Vec::new();
    for segment in body.split_inclusive('\n') {
        let (content, ending) = if let Some(c) = segment.strip_suffix("\r\n") {
            (c, Ending::CrLf)
        } else if let Some(c) = segment.strip_suffix('\n') {
            (c, Ending::Lf)
        } else {
            (segment, Ending::Missing)
        };
        let mut pieces = content.split('\r').peekable();
        while let Some(piece) = pieces.next() {
            if pieces.peek().is_some() {
                lines.push(Line {
                    text: piece,
                    ending: Ending::Cr,
                });
            } else if !(ending == Ending::Missing && piece.is_empty()) {
                lines.push(Line {
                    text: piece,
                    ending,
                });
            }
        }
    }
    let dominant = dominant(&lines);
    Text {
        bom,
        lines,
        dominant,
    }
}

fn dominant(lines: &[Line<'_>]) -> Ending {
    let mut counts: Vec<(Ending, usize)> = Vec::with_capacity(3);
    for line in lines.iter().filter(|l| l.ending != Ending::Missing) {
        match counts.iter_mut().find(|(e, _)| *e == line.ending) {
            Some((_, n)) => *n += 1,
            None => counts.push((line.ending, 1)),
        }
    }
    // `counts` is in first-seen order; keep the earliest on ties.
    let mut best: Option<(Ending, usize)> = None;
    for (ending, n) in counts {
        if best.is_none_or(|(_, b)| n > b) {
            best = Some((ending, n));
        }
    }
    best.map_or(Ending::Lf, |(e, _)| e)
}

/// Renders lines back to bytes; a line without terminator gets `dominant`, so the result always
/// ends with a line terminator (unless it is empty).
pub(crate) fn render<'a>(
    bom: bool,
    lines: impl IntoIterator<Item = (&'a str, Ending)>,
    dominant: Ending,
) -> Vec<u8> {
    let mut out = String::new();
    if bom {
        out.push(BOM);
    }
    for (text, ending) in lines {
        out.push_str(text);
        let ending = if ending == Ending::Missing {
            dominant
        } else {
            ending
        };
        out.push_str(ending.as_str());
    }
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(src: &str) -> Vec<(&str, Ending)> {
        split(src)
            .lines
            .into_iter()
            .map(|l| (l.text, l.ending))
            .collect()
    }

    #[test]
    fn empty_file_has_no_lines() {
        let t = split("");
        assert!(t.lines.is_empty());
        assert_eq!(t.dominant, Ending::Lf);
    }

    #[test]
    fn each_terminator_is_recognised() {
        assert_eq!(
            shape("a\r\nb\rc\nd"),
            vec![
                ("a", Ending::CrLf),
                ("b", Ending::Cr),
                ("c", Ending::Lf),
                ("d", Ending::Missing)
            ]
        );
    }

    #[test]
    fn trailing_lone_cr_ends_the_last_line() {
        assert_eq!(shape("a\rb\r"), vec![("a", Ending::Cr), ("b", Ending::Cr)]);
    }

    #[test]
    fn empty_lines_are_kept() {
        assert_eq!(
            shape("\n\r\n\r"),
            vec![("", Ending::Lf), ("", Ending::CrLf), ("", Ending::Cr)]
        );
    }

    #[test]
    fn dominant_is_the_majority_then_first_seen() {
        assert_eq!(split("a\r\nb\rc\nd\r\n").dominant, Ending::CrLf);
        assert_eq!(split("a\rb\nc\r").dominant, Ending::Cr);
        assert_eq!(split("a\nb\r\n").dominant, Ending::Lf);
        assert_eq!(split("a\r\nb\n").dominant, Ending::CrLf);
        assert_eq!(split("no newline").dominant, Ending::Lf);
    }

    #[test]
    fn bom_is_split_off_and_restored() {
        let t = split("\u{feff}x\r\n");
        assert!(t.bom);
        assert_eq!(t.lines.first().map(|l| l.text), Some("x"));
        let out = render(
            t.bom,
            t.lines.iter().map(|l| (l.text, l.ending)),
            t.dominant,
        );
        assert_eq!(out, "\u{feff}x\r\n".as_bytes());
    }

    #[test]
    fn render_round_trips_and_adds_a_final_terminator() {
        let src = "a\r\nb\rc\nd";
        let t = split(src);
        let out = render(
            false,
            t.lines.iter().map(|l| (l.text, l.ending)),
            t.dominant,
        );
        assert_eq!(out, b"a\r\nb\rc\nd\r\n");
    }
}
