//! UTF-8 boundary helper: finds an incomplete multi-byte sequence at the end of a chunk.

/// Length of an incomplete UTF-8 sequence at the end of `bytes` (0 when the end is complete or the
/// tail is not a valid sequence prefix, which lossy decoding will replace anyway).
pub(crate) fn incomplete_tail(bytes: &[u8]) -> usize {
    let mut continuation = 0usize;
    for &b in bytes.iter().rev() {
        if b & 0xC0 == 0x80 {
            continuation += 1;
            if continuation > 3 {
                return 0;
            }
            continue;
        }
        let needed = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        let have = continuation + 1;
        return if needed > have { have } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_text_has_no_incomplete_tail() {
        assert_eq!(incomplete_tail(b""), 0);
        assert_eq!(incomplete_tail(b"abc"), 0);
        assert_eq!(incomplete_tail("a€".as_bytes()), 0);
        assert_eq!(incomplete_tail("😀".as_bytes()), 0);
    }

    #[test]
    fn cut_sequences_are_detected() {
        let euro = "€".as_bytes();
        assert_eq!(incomplete_tail(&euro[..1]), 1);
        assert_eq!(incomplete_tail(&euro[..2]), 2);
        let face = "x😀".as_bytes();
        assert_eq!(incomplete_tail(&face[..4]), 3);
        assert_eq!(incomplete_tail(&face[..2]), 1);
        assert_eq!(incomplete_tail("é".as_bytes().get(..1).unwrap()), 1);
    }

    #[test]
    fn stray_continuation_bytes_are_not_held_back() {
        assert_eq!(incomplete_tail(&[0x80, 0x80]), 0);
        assert_eq!(incomplete_tail(&[b'a', 0x80]), 0);
        assert_eq!(incomplete_tail(&[0xE2, 0x82, 0xAC, 0x80]), 0);
    }
}
