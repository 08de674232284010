//! Bounded byte ring: keeps the newest `cap` bytes of a stream and counts every byte ever written.

use std::collections::VecDeque;

/// The newest bytes of one output stream plus the running total.
#[derive(Debug)]
pub(crate) struct ByteRing {
    buf: VecDeque<u8>,
    cap: usize,
    total: u64,
}

impl ByteRing {
    /// An empty ring keeping at most `cap` bytes (at least one).
    pub(crate) fn new(cap: usize) -> Self {
        ByteRing {
            buf: VecDeque::new(),
            cap: cap.max(1),
            total: 0,
        }
    }

    /// Appends `data`, dropping the oldest bytes beyond the capacity.
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.total = self.total.saturating_add(data.len() as u64);
        if data.len() >= self.cap {
            self.buf.clear();
            let tail = data.get(data.len() - self.cap..).unwrap_or(data);
            self.buf.extend(tail);
            return;
        }
        let overflow = (self.buf.len() + data.len()).saturating_sub(self.cap);
        if overflow > 0 {
            self.buf.drain(..overflow);
        }
        self.buf.extend(data);
    }

    /// Bytes written since creation.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Absolute offset of the oldest retained byte.
    pub(crate) fn retained_from(&self) -> u64 {
        self.total - self.buf.len() as u64
    }

    /// Copies the retained bytes from `max(cursor, retained_from)` (clamped to the end) to the end.
    /// Returns the absolute start offset and the bytes.
    pub(crate) fn copy_from(&self, cursor: u64) -> (u64, Vec<u8>) {
        let from = self.retained_from();
        let start = cursor.clamp(from, self.total);
        let skip = usize::try_from(start - from).unwrap_or(usize::MAX);
        let (front, back) = self.buf.as_slices();
        let mut out = Vec::with_capacity(self.buf.len().saturating_sub(skip));
        if let Some(rest) = front.get(skip..) {
            out.extend_from_slice(rest);
            out.extend_from_slice(back);
        } else if let Some(rest) = back.get(skip - front.len()..) {
            out.extend_from_slice(rest);
        }
        (start, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_below_capacity() {
        let mut r = ByteRing::new(8);
        r.push(b"abc");
        r.push(b"de");
        assert_eq!(r.total(), 5);
        assert_eq!(r.retained_from(), 0);
        assert_eq!(r.copy_from(0), (0, b"abcde".to_vec()));
        assert_eq!(r.copy_from(3), (3, b"de".to_vec()));
        assert_eq!(r.copy_from(99), (5, Vec::new()));
    }

    #[test]
    fn drops_oldest_bytes_and_reports_window() {
        let mut r = ByteRing::new(4);
        r.push(b"abc");
        r.push(b"def");
        assert_eq!(r.total(), 6);
        assert_eq!(r.retained_from(), 2);
        assert_eq!(r.copy_from(0), (2, b"cdef".to_vec()));
        assert_eq!(r.copy_from(4), (4, b"ef".to_vec()));
    }

    #[test]
    fn oversized_write_keeps_its_tail() {
        let mut r = ByteRing::new(4);
        r.push(b"xy");
        r.push(b"0123456789");
        assert_eq!(r.total(), 12);
        assert_eq!(r.retained_from(), 8);
        assert_eq!(r.copy_from(0), (8, b"6789".to_vec()));
    }

    #[test]
    fn wrapped_buffer_reads_across_both_halves() {
        let mut r = ByteRing::new(5);
        for chunk in [&b"abc"[..], b"de", b"fg", b"h", b"ij"] {
            r.push(chunk);
        }
        assert_eq!(r.copy_from(0), (5, b"fghij".to_vec()));
        assert_eq!(r.copy_from(7), (7, b"hij".to_vec()));
        assert_eq!(r.copy_from(9), (9, b"j".to_vec()));
    }
}
