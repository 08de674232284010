//! Our own corpus: line endings, repeated blocks, look-alikes, EOF chunks, edge sizes, junk input.
// Test-only crate: helpers outside #[test] fns may fail loudly, as the tests themselves do.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use crate::common;

use codespace_runner_patch::{FileState, parse, plan};
use common::MemFs;

fn patch(body: &str) -> String {
    format!("*** Begin Patch\n{body}\n*** End Patch\n")
}

fn apply_one(path: &str, before: &[u8], body: &str) -> Vec<u8> {
    let mut fs = MemFs::from_files(&[(path, before)]);
    fs.run(&patch(body)).unwrap_or_else(|e| panic!("{e:?}"));
    fs.files[path].0.clone()
}

fn reject_one(path: &str, before: &[u8], body: &str) -> (String, String) {
    let mut fs = MemFs::from_files(&[(path, before)]);
    let err = fs.run(&patch(body)).unwrap_err();
    assert_eq!(fs.files[path].0, before, "file must be unchanged");
    err
}

// ---- line endings ----------------------------------------------------------------------------

#[test]
fn cr_only_file_stays_cr_only() {
    let out = apply_one(
        "mac.txt",
        b"one\rtwo\rthree\r",
        "*** Update File: mac.txt\n@@\n one\n-two\n+TWO\n+extra\n three",
    );
    assert_eq!(out, b"one\rTWO\rextra\rthree\r");
}

#[test]
fn crlf_file_stays_crlf_including_inserted_lines() {
    let out = apply_one(
        "w.txt",
        b"a\r\nb\r\nc\r\n",
        "*** Update File: w.txt\n@@ a\n+after a\n@@\n-c\n+C\n+D",
    );
    assert_eq!(out, b"a\r\nafter a\r\nb\r\nC\r\nD\r\n");
}

#[test]
fn crlf_patch_on_crlf_file() {
    let text = patch("*** Update File: w.txt\n@@\n-b\n+B").replace('\n', "\r\n");
    let mut fs = MemFs::from_files(&[("w.txt", b"a\r\nb\r\n")]);
    fs.run(&text).unwrap();
    assert_eq!(fs.files["w.txt"].0, b"a\r\nB\r\n");
}

#[test]
fn mixed_endings_keep_each_untouched_line_and_insert_with_the_majority() {
    // CRLF is the majority (3 of 5); the LF and CR lines keep their own endings.
    let out = apply_one(
        "m.txt",
        b"a\r\nb\nc\r\nd\re\r\n",
        "*** Update File: m.txt\n@@\n b\n+inserted\n c\n-d\n+D\n e",
    );
    assert_eq!(out, b"a\r\nb\ninserted\r\nc\r\nD\r\ne\r\n");
}

#[test]
fn missing_final_newline_is_added_with_the_file_ending() {
    assert_eq!(
        apply_one("n.txt", b"a\nb", "*** Update File: n.txt\n@@\n-a\n+A"),
        b"A\nb\n"
    );
    assert_eq!(
        apply_one("n.txt", b"a\r\nb", "*** Update File: n.txt\n@@\n-a\n+A"),
        b"A\r\nb\r\n"
    );
    assert_eq!(
        apply_one(
            "n.txt",
            b"only",
            "*** Update File: n.txt\n@@\n-only\n+first\n+second"
        ),
        b"first\nsecond\n"
    );
}

#[test]
fn byte_order_mark_is_kept() {
    let out = apply_one(
        "bom.txt",
        "\u{feff}first\r\nsecond\r\n".as_bytes(),
        "*** Update File: bom.txt\n@@\n-first\n+FIRST",
    );
    assert_eq!(out, "\u{feff}FIRST\r\nsecond\r\n".as_bytes());
}

#[test]
fn added_files_are_written_as_given() {
    let mut fs = MemFs::default();
    fs.run(&patch("*** Add File: new.txt\n+a\n+\n+b")).unwrap();
    assert_eq!(fs.files["new.txt"].0, b"a\n\nb\n");
}

// ---- choosing the right occurrence --------------------------------------------------------------

const REPEATED: &str =
    "fn one() {\n    let x = 0;\n    work(x);\n}\n\nfn two() {\n    let x = 0;\n    work(x);\n}\n";

#[test]
fn repeated_block_first_occurrence_without_context() {
    let out = apply_one(
        "r.rs",
        REPEATED.as_bytes(),
        "*** Update File: r.rs\n@@\n-    let x = 0;\n+    let x = 1;",
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        REPEATED.replacen("let x = 0;", "let x = 1;", 1)
    );
}

#[test]
fn repeated_block_chosen_by_context_line() {
    let out = apply_one(
        "r.rs",
        REPEATED.as_bytes(),
        "*** Update File: r.rs\n@@ fn two() {\n-    let x = 0;\n+    let x = 2;",
    );
    let expected = "fn one() {\n    let x = 0;\n    work(x);\n}\n\nfn two() {\n    let x = 2;\n    work(x);\n}\n";
    assert_eq!(String::from_utf8(out).unwrap(), expected);
}

#[test]
fn repeated_block_chosen_by_chunk_order() {
    let out = apply_one(
        "r.rs",
        REPEATED.as_bytes(),
        "*** Update File: r.rs\n@@\n-    work(x);\n+    first(x);\n@@\n-    work(x);\n+    second(x);",
    );
    let expected = "fn one() {\n    let x = 0;\n    first(x);\n}\n\nfn two() {\n    let x = 0;\n    second(x);\n}\n";
    assert_eq!(String::from_utf8(out).unwrap(), expected);
}

#[test]
fn pure_addition_is_anchored_at_its_context_not_eof() {
    let out = apply_one(
        "r.rs",
        REPEATED.as_bytes(),
        "*** Update File: r.rs\n@@ fn one() {\n+    // added",
    );
    assert!(
        String::from_utf8(out)
            .unwrap()
            .starts_with("fn one() {\n    // added\n    let x = 0;\n")
    );
}

// ---- Unicode look-alikes (pass 4) ---------------------------------------------------------------

#[test]
fn unicode_look_alikes_match_ascii_patch_lines() {
    let file = "title = “Hello – world”\nquote = ‘it’s’\nspace = a\u{00A0}b\nmath = 3 − 1\n";
    let out = apply_one(
        "u.toml",
        file.as_bytes(),
        "*** Update File: u.toml\n@@\n title = \"Hello - world\"\n-quote = 'it's'\n+quote = \"its\"\n space = a b\n-math = 3 - 1\n+math = 2",
    );
    // Context lines keep the file's own characters; replaced lines take the patch text.
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "title = “Hello – world”\nquote = \"its\"\nspace = a\u{00A0}b\nmath = 2\n"
    );
}

#[test]
fn look_alike_folding_does_not_match_different_text() {
    let (code, msg) = reject_one(
        "u.txt",
        "a — b\n".as_bytes(),
        "*** Update File: u.txt\n@@\n-a _ b\n+x",
    );
    assert_eq!(code, "INVALID_PATCH");
    assert!(msg.contains("'a _ b'"), "{msg}");
}

// ---- end-of-file chunks ---------------------------------------------------------------------------

#[test]
fn eof_chunk_prefers_the_last_occurrence() {
    let out = apply_one(
        "e.txt",
        b"end\nmiddle\nend\n",
        "*** Update File: e.txt\n@@\n-end\n+END\n*** End of File",
    );
    assert_eq!(out, b"end\nmiddle\nEND\n");
}

#[test]
fn overlapping_eof_chunks_are_rejected() {
    let (code, msg) = reject_one(
        "e.txt",
        b"a\nb\nc\n",
        "*** Update File: e.txt\n@@\n b\n-c\n+C\n*** End of File\n@@\n-c\n+D\n*** End of File",
    );
    assert_eq!(code, "INVALID_PATCH");
    assert!(msg.contains("chunk 2 of 2"), "{msg}");
}

#[test]
fn chunk_before_an_eof_chunk_applies_in_order() {
    let out = apply_one(
        "e.txt",
        b"a\nb\nc\n",
        "*** Update File: e.txt\n@@\n-a\n+A\n@@\n-c\n+C\n*** End of File",
    );
    assert_eq!(out, b"A\nb\nC\n");
}

#[test]
fn eof_pure_addition_appends() {
    let out = apply_one(
        "e.txt",
        b"a\n",
        "*** Update File: e.txt\n@@\n+z\n*** End of File",
    );
    assert_eq!(out, b"a\nz\n");
}

// ---- empty files ------------------------------------------------------------------------------------

#[test]
fn empty_file_accepts_a_pure_addition() {
    assert_eq!(
        apply_one("e", b"", "*** Update File: e\n@@\n+first"),
        b"first\n"
    );
}

#[test]
fn empty_file_has_nothing_to_replace() {
    let (code, _) = reject_one("e", b"", "*** Update File: e\n@@\n-x\n+y");
    assert_eq!(code, "INVALID_PATCH");
}

#[test]
fn empty_file_can_be_deleted_and_empty_add_works() {
    let mut fs = MemFs::from_files(&[("e", b"")]);
    fs.run(&patch("*** Delete File: e\n*** Add File: f"))
        .unwrap();
    assert_eq!(
        fs.tree().into_iter().collect::<Vec<_>>(),
        vec![("f".to_string(), vec![])]
    );
}

#[test]
fn deleting_every_line_leaves_an_empty_file() {
    assert_eq!(
        apply_one("f", b"a\nb\n", "*** Update File: f\n@@\n-a\n-b"),
        b""
    );
}

// ---- sizes --------------------------------------------------------------------------------------------

#[test]
fn ten_thousand_line_file() {
    let lines: Vec<String> = (0..10_000).map(|i| format!("line {i}")).collect();
    let before = lines.join("\n") + "\n";
    let body = "*** Update File: big.txt\n@@ line 9\n-line 10\n+line ten\n@@ line 4999\n line 5000\n+inserted\n line 5001\n@@\n-line 9999\n+last\n*** End of File";
    let out = String::from_utf8(apply_one("big.txt", before.as_bytes(), body)).unwrap();
    let mut expected = lines.clone();
    expected[10] = "line ten".into();
    expected[9999] = "last".into();
    expected.insert(5001, "inserted".into());
    assert_eq!(out, expected.join("\n") + "\n");
}

#[test]
fn two_hundred_file_patch() {
    let mut fs = MemFs::default();
    for i in 0..100 {
        fs.files.insert(
            format!("src/m{i}.rs"),
            (
                format!("pub fn f{i}() -> u32 {{\n    {i}\n}}\n").into_bytes(),
                0o644,
            ),
        );
    }
    let mut body = String::new();
    for i in 0..100 {
        body.push_str(&format!(
            "*** Update File: src/m{i}.rs\n@@ pub fn f{i}() -> u32 {{\n-    {i}\n+    {}\n",
            i * 2
        ));
        body.push_str(&format!("*** Add File: gen/g{i}.txt\n+generated {i}\n"));
    }
    fs.run(&patch(body.trim_end())).unwrap();
    assert_eq!(fs.files.len(), 200);
    for i in 0..100 {
        assert_eq!(
            fs.text(&format!("src/m{i}.rs")),
            format!("pub fn f{i}() -> u32 {{\n    {}\n}}\n", i * 2)
        );
        assert_eq!(
            fs.text(&format!("gen/g{i}.txt")),
            format!("generated {i}\n")
        );
    }
}

#[test]
fn one_bad_file_among_many_rejects_the_whole_patch() {
    let mut fs = MemFs::default();
    let mut body = String::new();
    for i in 0..50 {
        fs.files.insert(format!("f{i}"), (b"x\n".to_vec(), 0o644));
        let old = if i == 37 { "not there" } else { "x" };
        body.push_str(&format!("*** Update File: f{i}\n@@\n-{old}\n+y\n"));
    }
    let before = fs.clone();
    let (code, msg) = fs.run(&patch(body.trim_end())).unwrap_err();
    assert_eq!(code, "INVALID_PATCH");
    assert!(msg.contains("'f37'"), "{msg}");
    assert_eq!(fs, before);
}

// ---- hostile input --------------------------------------------------------------------------------

/// Small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const PIECES: &[&str] = &[
    "*** Begin Patch",
    "*** End Patch",
    "*** Add File: a",
    "*** Delete File: a",
    "*** Update File: a",
    "*** Update File: b",
    "*** Move to: b",
    "*** Move to: a",
    "*** End of File",
    "@@",
    "@@ x",
    "@@ ",
    " x",
    "-x",
    "+x",
    "-",
    "+",
    " ",
    "",
    "\r",
    "  *** End Patch",
    "<<EOF",
    "EOF",
    "x",
    "-y",
    "+“y”",
    " \u{00A0}x",
    "*** ",
    "***",
    "@",
    "+\r",
    "-\u{2014}",
    "*** Add File:",
    "*** Update File: a/b",
];

fn junk_patch(rng: &mut Rng) -> String {
    let n = rng.below(12);
    let mut lines: Vec<&str> = Vec::with_capacity(n + 2);
    if rng.below(4) != 0 {
        lines.push("*** Begin Patch");
    }
    for _ in 0..n {
        lines.push(PIECES[rng.below(PIECES.len())]);
    }
    if rng.below(4) != 0 {
        lines.push("*** End Patch");
    }
    lines.join(if rng.below(3) == 0 { "\r\n" } else { "\n" })
}

#[test]
fn random_patches_never_panic_and_are_deterministic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let files: &[(&str, &[u8])] = &[("a", b"x\ny\nx\r\n"), ("b", b"x")];
    let mut parsed_ok = 0;
    let mut planned_ok = 0;
    for _ in 0..20_000 {
        let text = junk_patch(&mut rng);
        let first = parse(&text);
        assert_eq!(first, parse(&text), "parse must be deterministic");
        if let Ok(p) = first {
            parsed_ok += 1;
            let fs = MemFs::from_files(files);
            let a = plan(&p, |path| fs.lookup(path));
            let b = plan(&p, |path| fs.lookup(path));
            match (&a, &b) {
                (Ok(x), Ok(y)) => {
                    assert_eq!(x, y);
                    planned_ok += 1;
                }
                (Err(x), Err(y)) => assert_eq!(x.to_string(), y.to_string()),
                _ => panic!("plan must be deterministic for {text:?}"),
            }
        }
    }
    // The generator must exercise both outcomes, or the test proves little.
    assert!(parsed_ok > 100, "{parsed_ok}");
    assert!(planned_ok > 10, "{planned_ok}");
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(42);
    for _ in 0..5_000 {
        let len = rng.below(200);
        let bytes: Vec<u8> = (0..len).map(|_| (rng.next() & 0xff) as u8).collect();
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse(&text);
        let wrapped = format!("*** Begin Patch\n*** Update File: a\n{text}\n*** End Patch");
        if let Ok(p) = parse(&wrapped) {
            let mut junk_file = bytes.clone();
            junk_file.extend_from_slice(b"\r\n\r");
            let fs = MemFs::from_files(&[("a", &junk_file)]);
            let _ = plan(&p, |path| fs.lookup(path));
        }
    }
}

#[test]
fn junk_file_contents_never_panic() {
    let mut rng = Rng(7);
    let body = "*** Update File: a\n@@ \u{2014}\n \r\n-\u{00A0}\n+z\n*** End of File";
    let p = parse(&patch(body)).unwrap();
    for _ in 0..2_000 {
        let len = rng.below(64);
        let alphabet = [
            "\r", "\n", "\u{2014}", "\u{00A0}", " ", "-", "\u{feff}", "a",
        ];
        let data: String = (0..len)
            .map(|_| alphabet[rng.below(alphabet.len())])
            .collect();
        let _ = plan(&p, |_| {
            Ok::<_, ()>(FileState::File {
                data: data.clone().into_bytes(),
                mode: 0o644,
            })
        });
    }
}
