//! The signature-key bench (issue 34, listing): `SignaturePlan::key_into` under the shipped
//! policy set over 60 000 paths shaped like a repository (nested directories, common extensions,
//! a few secrets), the per-entry work of policy filtering by signature classes in `find` and the
//! first walk. Against a floor measured in the same rounds: the same loop that only splits each
//! path into its basename and extension and copies it into the key buffer.
//!
//! `cargo bench -p codespace-policy --bench signature`

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use codespace_policy::signature::SignaturePlan;
use codespace_policy::{PolicySource, compile};
use std::hint::black_box;
use std::time::Instant;

/// 60 000 workspace-relative paths: 6 000 directories of 10 entries, some of them secrets.
fn paths() -> Vec<String> {
    let exts = [
        "rs", "ts", "json", "md", "toml", "py", "lock", "txt", "env", "pem",
    ];
    let mut out = Vec::with_capacity(60_000);
    for d in 0..6_000u32 {
        let dir = format!("pkg{}/src/module{}/part{}", d % 37, d % 211, d);
        for f in 0..10u32 {
            let name = match (d + f) % 97 {
                0 => ".env".to_string(),
                1 => format!("id_rsa{f}"),
                _ => format!("file{f}.{}", exts[((d * 7 + f) % 10) as usize]),
            };
            out.push(format!("{dir}/{name}"));
        }
    }
    out
}

/// Nanoseconds per path of `f` over every path.
fn per_path(paths: &[String], f: &mut impl FnMut(&str) -> usize) -> f64 {
    let start = Instant::now();
    let mut sum = 0usize;
    for p in paths {
        sum = sum.wrapping_add(f(p));
    }
    black_box(sum);
    start.elapsed().as_nanos() as f64 / paths.len() as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let snap = compile(PolicySource::Embedded.read().unwrap()).unwrap();
    let plan = SignaturePlan::analyse(&snap.set);
    let paths = paths();
    let mut key = String::with_capacity(64);
    let mut keyed = |p: &str| {
        plan.key_into(&mut key, p, false, 1);
        key.len()
    };
    let mut buf = String::with_capacity(64);
    let mut floor = |p: &str| {
        buf.clear();
        let base = p.rsplit('/').next().unwrap_or("");
        let ext = base.rsplit_once('.').map_or("", |(_, e)| e);
        buf.push_str(p);
        base.len() + ext.len() + buf.len()
    };
    let (mut ours, mut floors) = (Vec::new(), Vec::new());
    for _ in 0..21 {
        ours.push(per_path(&paths, &mut keyed));
        floors.push(per_path(&paths, &mut floor));
    }
    let (o, f) = (median(&mut ours), median(&mut floors));
    println!(
        "signature key over {} paths (median of 21 interleaved rounds): key_into {o:.1} ns/path, \
         floor (split + copy) {f:.1} ns/path, {:.1}x the floor; {:.2} ms per 60 000",
        paths.len(),
        o / f,
        o * 60_000.0 / 1e6
    );
}
