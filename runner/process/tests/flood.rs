//! Output flood: 200 MB through cursors keeps memory bounded and the retained window correct.
// Its own test binary (not in tests/it/): it bounds the resident memory (VmRSS) of the whole test process, which other tests in parallel would add to.
// Test helpers outside #[test] fns assert with unwrap/panic like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "it/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use codespace_runner_process::{ProcessTable, TableLimits};
use common::*;

const FLOOD: u64 = 200_000_000;

fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flood_of_200_mb_is_bounded_and_readable_through_cursors() {
    let (_d, cwd) = workdir();
    let limits = TableLimits::default();
    let ring = limits.ring_bytes as u64;
    let table = ProcessTable::new(limits);
    let rss_before = vm_rss_kib();
    let mut rss_peak = rss_before;
    let start = Instant::now();
    let p = table
        .spawn(spec(&cwd, &["head", "-c", &FLOOD.to_string(), "/dev/zero"]))
        .await
        .unwrap();
    let mut cursor = 0u64;
    let mut received = 0u64;
    let mut skipped = 0u64;
    let mut reads = 0u64;
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "flood not drained in 300 s"
        );
        let chunk = table
            .read(&p.id, cursor, Some(Duration::from_secs(10)))
            .await
            .unwrap();
        let start_of_chunk = cursor.max(chunk.retained_from);
        skipped += start_of_chunk - cursor;
        assert!(
            chunk.data.len() as u64 <= ring,
            "one read exceeded the ring"
        );
        assert_eq!(chunk.cursor, start_of_chunk + chunk.data.len() as u64);
        assert!(chunk.data.iter().all(|b| *b == 0));
        received += chunk.data.len() as u64;
        cursor = chunk.cursor;
        reads += 1;
        if reads.is_multiple_of(16) {
            rss_peak = rss_peak.max(vm_rss_kib());
        }
        if chunk.eof {
            assert!(chunk.output_lost);
            assert_eq!(chunk.retained_from, FLOOD - ring);
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    rss_peak = rss_peak.max(vm_rss_kib());
    assert_eq!(cursor, FLOOD);
    assert_eq!(received + skipped, FLOOD);
    let info = table.status(&p.id).await.unwrap();
    assert_eq!(info.output_total, FLOOD);
    assert_eq!(info.output_retained_from, FLOOD - ring);
    assert!(info.eof);
    assert_eq!(info.exit_code, Some(0));
    // The retained window reads back exactly `ring` bytes from the start of the window.
    let tail = table.read(&p.id, 0, None).await.unwrap();
    assert_eq!(tail.data.len() as u64, ring);
    assert!(tail.eof && tail.output_lost);
    let grown_mib = rss_peak.saturating_sub(rss_before) / 1024;
    eprintln!(
        "flood drain: {:.1} MB/s ({} MB in {secs:.2} s, {reads} reads, {:.1} MB read, {:.1} MB skipped, RSS +{grown_mib} MiB)",
        FLOOD as f64 / 1e6 / secs,
        FLOOD / 1_000_000,
        received as f64 / 1e6,
        skipped as f64 / 1e6,
    );
    assert!(grown_mib < 100, "RSS grew by {grown_mib} MiB");
}
