//! Shared output state of one process: the ring, the collection-finished flag and change notification.

use std::sync::Mutex;

use tokio::sync::watch;

use crate::ring::ByteRing;
use crate::types::ReadChunk;
use crate::utf8::incomplete_tail;

#[derive(Debug)]
struct State {
    ring: ByteRing,
    open_writers: usize,
    finished: bool,
}

/// Combined output of one process, written by pump tasks/threads and read by clients.
#[derive(Debug)]
pub(crate) struct Output {
    state: Mutex<State>,
    changed: watch::Sender<u64>,
}

/// Read-only view used for status.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutputStats {
    pub(crate) total: u64,
    pub(crate) retained_from: u64,
    pub(crate) finished: bool,
}

impl Output {
    /// Output fed by `writers` independent pumps; collection finishes when all of them are done.
    pub(crate) fn new(ring_bytes: usize, writers: usize) -> Self {
        let (changed, _) = watch::channel(0);
        Output {
            state: Mutex::new(State {
                ring: ByteRing::new(ring_bytes),
                open_writers: writers,
                finished: writers == 0,
            }),
            changed,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn notify(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Appends bytes. Returns false once collection is finished (the pump should stop).
    pub(crate) fn push(&self, data: &[u8]) -> bool {
        {
            let mut st = self.lock();
            if st.finished {
                return false;
            }
            st.ring.push(data);
        }
        self.notify();
        true
    }

    /// One pump reached end of stream.
    pub(crate) fn writer_done(&self) {
        {
            let mut st = self.lock();
            st.open_writers = st.open_writers.saturating_sub(1);
            if st.open_writers == 0 {
                st.finished = true;
            }
        }
        self.notify();
    }

    /// Ends collection now, discarding anything pumps still deliver.
    pub(crate) fn force_finish(&self) {
        self.lock().finished = true;
        self.notify();
    }

    /// Totals and flags.
    pub(crate) fn stats(&self) -> OutputStats {
        let st = self.lock();
        OutputStats {
            total: st.ring.total(),
            retained_from: st.ring.retained_from(),
            finished: st.finished,
        }
    }

    /// A receiver that wakes on every change after this call.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Waits until collection has finished.
    pub(crate) async fn wait_finished(&self) {
        let mut rx = self.subscribe();
        while !self.stats().finished {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Reads from `cursor` to the end, never ending inside a UTF-8 sequence while output may continue.
    pub(crate) fn read(&self, cursor: u64) -> ReadChunk {
        self.read_window(cursor, None, false)
    }

    /// Reads from `cursor`, at most `max` bytes (never ending inside a UTF-8 sequence unless the
    /// first character alone is longer than `max`); with `tail`, only the last `max` bytes before
    /// the end (from `cursor` when that is later), starting on a character boundary.
    pub(crate) fn read_window(&self, cursor: u64, max: Option<usize>, tail: bool) -> ReadChunk {
        let st = self.lock();
        let cursor = match (tail, max) {
            (true, Some(m)) => cursor.max(st.ring.total().saturating_sub(m as u64)),
            _ => cursor,
        };
        let (mut start, mut data) = st.ring.copy_from(cursor);
        if tail {
            // Skip continuation bytes: a tail never starts inside a character.
            let skip = data
                .iter()
                .take(3)
                .take_while(|b| *b & 0xC0 == 0x80)
                .count();
            data.drain(..skip);
            start += skip as u64;
        }
        let capped = max.is_some_and(|m| data.len() > m);
        if let Some(m) = max {
            data.truncate(m);
        }
        if !st.finished || capped {
            let cut = incomplete_tail(&data);
            // A cap smaller than the first character returns its bytes rather than nothing.
            if !(capped && cut == data.len()) {
                data.truncate(data.len() - cut);
            }
        }
        let next = start + data.len() as u64;
        let retained_from = st.ring.retained_from();
        let eof = st.finished && next == st.ring.total();
        drop(st);
        ReadChunk {
            cursor: next,
            chunk: String::from_utf8_lossy(&data).into_owned(),
            data,
            eof,
            output_lost: retained_from > 0,
            retained_from,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_back_incomplete_char_until_finished() {
        let out = Output::new(64, 1);
        let euro = "€".as_bytes();
        assert!(out.push(b"a"));
        assert!(out.push(&euro[..2]));
        let r = out.read(0);
        assert_eq!(r.data, b"a");
        assert_eq!(r.cursor, 1);
        assert!(!r.eof);
        out.writer_done();
        let r = out.read(1);
        assert_eq!(r.data, &euro[..2]);
        assert!(r.eof);
    }

    #[test]
    fn push_after_finish_is_refused() {
        let out = Output::new(64, 2);
        out.writer_done();
        assert!(!out.stats().finished);
        out.force_finish();
        assert!(!out.push(b"late"));
        assert_eq!(out.stats().total, 0);
        assert!(out.read(0).eof);
    }

    #[test]
    fn windows_cap_and_tail_on_character_boundaries() {
        let out = Output::new(64, 1);
        assert!(out.push("ab€cd".as_bytes()));
        // The cap falls inside `€`: the window ends before it.
        let r = out.read_window(0, Some(3), false);
        assert_eq!(r.data, b"ab");
        assert_eq!(r.cursor, 2);
        assert!(!r.eof);
        let r = out.read_window(r.cursor, Some(3), false);
        assert_eq!(r.chunk, "€");
        // The tail starts after the cut character, never inside it.
        let r = out.read_window(0, Some(4), true);
        assert_eq!(r.chunk, "cd");
        assert_eq!(r.cursor, 7);
        let r = out.read_window(0, Some(5), true);
        assert_eq!(r.chunk, "€cd");
        // A later cursor wins over the tail start.
        let r = out.read_window(6, Some(5), true);
        assert_eq!(r.chunk, "d");
        out.writer_done();
        assert!(out.read_window(0, Some(2), true).eof);
        assert!(!out.read_window(0, Some(2), false).eof);
    }
}
