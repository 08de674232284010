//! Text shown to a person (the approvals CLI, `codespace audit`, the in-band approval question):
//! every control character made visible, so an argv or a file name cannot move the cursor, erase
//! a line or send an OSC sequence to the operator's terminal, and every cut marked with what it
//! left out. One escaping for every printer.

use serde_json::Value;
use std::borrow::Cow;

/// True for what [`escape`] rewrites: C0 controls, DEL, C1 controls, and the Unicode bidi
/// formatting characters that reorder what a terminal shows (U+061C, U+200E, U+200F,
/// U+202A–U+202E, U+2066–U+2069).
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `s` with every control character as a visible escape: `\n`, `\r`, `\t`, `\x1b` (any other
/// C0, DEL and C1 as `\xNN`), bidi formatting as `\u{202e}`. A backslash stays as it is.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) <= 0x9f && is_hidden(c) => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c if is_hidden(c) => out.push_str(&format!("\\u{{{:04x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A multi-line text (a patch) line by line: each line escaped, the line breaks kept.
pub fn escape_lines(s: &str) -> String {
    s.split('\n').map(escape).collect::<Vec<_>>().join("\n")
}

/// The marker of a cut: `… [cut: N more chars]`.
pub fn cut_marker(more: usize) -> String {
    format!("… [cut: {more} more chars]")
}

/// The first `max` characters of `s`, with [`cut_marker`] when it is longer.
pub fn cut(s: &str, max: usize) -> Cow<'_, str> {
    match s.char_indices().nth(max) {
        None => Cow::Borrowed(s),
        Some((at, _)) => {
            let more = s.get(at..).map_or(0, |rest| rest.chars().count());
            Cow::Owned(format!("{}{}", s.get(..at).unwrap_or(""), cut_marker(more)))
        }
    }
}

/// One JSON document on one line for a terminal or a log reader: serde_json already writes C0
/// controls as `\u00XX`; DEL, C1 and bidi formatting characters are written the same way (the
/// value read back is unchanged).
pub fn json_line(v: &Value) -> String {
    json_escape_rest(v.to_string())
}

/// [`json_line`], pretty-printed.
pub fn json_pretty(v: &Value) -> String {
    json_escape_rest(serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string()))
}

/// serde_json writes a line break inside a string as `\n`, so a raw one is the pretty form's
/// own; any other such character is inside a string, where `\uXXXX` stands for it.
fn json_escape_rest(text: String) -> String {
    let hidden = |c: char| c != '\n' && is_hidden(c);
    if !text.chars().any(hidden) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hidden(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_control_is_made_visible() {
        assert_eq!(escape("plain text / é 🦀"), "plain text / é 🦀");
        assert_eq!(
            escape("a\x1b[2Kb\x07\r\n\t\x7f\u{9b}c\u{202e}d"),
            "a\\x1b[2Kb\\x07\\r\\n\\t\\x7f\\x9bc\\u{202e}d"
        );
        assert_eq!(escape_lines("+a\x1b]0;x\x07\n+b"), "+a\\x1b]0;x\\x07\n+b");
    }

    #[test]
    fn a_cut_says_how_much_it_left_out() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcdé", 3), "abc… [cut: 2 more chars]");
    }

    #[test]
    fn json_keeps_its_value_and_shows_no_control() {
        let v = json!({"s": "a\x1b[2K\u{7f}\u{9b}\u{202e}b"});
        let line = json_line(&v);
        assert!(!line.chars().any(is_hidden), "{line}");
        assert_eq!(serde_json::from_str::<Value>(&line).unwrap(), v);
        let pretty = json_pretty(&v);
        assert!(
            !pretty.chars().any(|c| is_hidden(c) && c != '\n'),
            "{pretty}"
        );
        assert_eq!(serde_json::from_str::<Value>(&pretty).unwrap(), v);
    }
}
