//! The decision bench (issue 34): `Decider` decisions (uncached and from the decision cache)
//! against a bare Cedar `Authorizer::is_authorized` on the same request and entities, under the
//! shipped policy set and the `workspace-write` profile, for a `read` and an `exec_command`
//! request. After criterion's report it prints the ratios of the same run, and the bare call
//! on the request's action slice alone (the floor a sliced decision can reach).
//!
//! `cargo bench -p codespace-policy --bench decide` (see scripts/bench-decide.sh).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use cedar_policy::{Authorizer, Context, Entities, PolicySet, Request};
use codespace_policy::config::{
    Approvals, EnvironmentKind, Network, SandboxMode, builtin_profiles,
};
use codespace_policy::decide::{operation_entity, uid, workspace_entities};
use codespace_policy::facts::{MaskingFact, NetworkEnforcement, SandboxFact};
use codespace_policy::request::{
    Session, SubRequest, WorkspaceFacts, build_requests, path_request,
};
use codespace_policy::wire::{ExecCommandParams, ToolCall};
use codespace_policy::{Action, Decider, NoRows, PolicySnapshot, PolicySource, compile};
use criterion::Criterion;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn facts() -> WorkspaceFacts {
    WorkspaceFacts {
        id: "w".into(),
        profile: "workspace-write".into(),
        environment: "local".into(),
        environment_kind: EnvironmentKind::Host,
        environment_transport: codespace_policy::config::EnvironmentTransport::InProcess,
        environment_host: String::new(),
        sandbox: SandboxFact::Enforced,
        network_enforcement: NetworkEnforcement::Enforced,
        network: Network::Restricted,
        approvals: Approvals::Off,
        server_owned: vec![".codespace".into()],
        workspace_sandbox: SandboxMode::Required,
        secret_masking: MaskingFact::Enforced,
    }
}

/// The representative requests: a `read` of a source file, and the gating `exec_command`
/// sub-request of `cargo test`.
fn requests(s: &Session) -> Vec<(&'static str, SubRequest)> {
    let exec = ToolCall::ExecCommand(ExecCommandParams {
        workspace_id: "w".into(),
        command: vec!["cargo".into(), "test".into()],
        tty: None,
        timeout_ms: None,
        yield_ms: None,
        operation_key: None,
        env: None,
        cwd: None,
        background: None,
        stderr: None,
    });
    let exec = build_requests(&exec, s, None)
        .unwrap()
        .into_iter()
        .find(|r| r.action == Action::EXEC_COMMAND)
        .unwrap();
    vec![
        ("read", path_request(Action::READ, "src/lib.rs", "", s)),
        ("exec_command", exec),
    ]
}

/// The bare call's inputs: the workspace's entities with the request's Operation, and the
/// request, built once outside the measured loop.
fn bare_inputs(
    snap: &PolicySnapshot,
    facts: &WorkspaceFacts,
    tool: &str,
    req: &SubRequest,
) -> (Request, Entities) {
    let base = workspace_entities(snap, &builtin_profiles(), facts).unwrap();
    let op = operation_entity(facts, tool, req, "op").unwrap();
    let entities = base.add_entities([op], None).unwrap();
    let action = uid("Action", req.action.as_str()).unwrap();
    let ctx = Context::from_json_value(req.context.clone(), Some((&snap.schema, &action))).unwrap();
    let request = Request::new(
        uid("PermissionProfile", &facts.profile).unwrap(),
        action,
        uid("Operation", "op").unwrap(),
        ctx,
        Some(&snap.schema),
    )
    .unwrap();
    (request, entities)
}

/// One bare Cedar evaluation: the floor a `Decider` decision is measured against.
fn bare(authorizer: &Authorizer, set: &PolicySet, r: &Request, e: &Entities) -> bool {
    // The bench's baseline (clippy.toml disallows it outside the policy layer): nothing acts
    // on this answer.
    #[allow(clippy::disallowed_methods)]
    let resp = authorizer.is_authorized(r, set, e);
    resp.decision() == cedar_policy::Decision::Allow
}

struct Setup {
    snap: Arc<PolicySnapshot>,
    decider: Decider,
    facts: WorkspaceFacts,
    session: Session,
}

fn setup() -> Setup {
    let snap = Arc::new(compile(PolicySource::Embedded.read().unwrap()).unwrap());
    let decider = Decider::over(Arc::clone(&snap), builtin_profiles(), Arc::new(NoRows));
    Setup {
        snap,
        decider,
        facts: facts(),
        session: Session::stdio(),
    }
}

fn benches(c: &mut Criterion, s: &Setup) {
    let authorizer = Authorizer::new();
    for (tool, req) in requests(&s.session) {
        let (request, entities) = bare_inputs(&s.snap, &s.facts, tool, &req);
        let reqs = [req];
        let mut g = c.benchmark_group(tool);
        g.bench_function("bare_is_authorized", |b| {
            b.iter(|| bare(&authorizer, &s.snap.set, black_box(&request), &entities))
        });
        g.bench_function("decider_uncached", |b| {
            b.iter(|| {
                s.decider
                    .probe_uncached(&s.snap, &s.facts, tool, black_box(&reqs), &s.session)
                    .allowed()
            })
        });
        g.bench_function("decider_cached", |b| {
            b.iter(|| {
                s.decider
                    .decide(&s.snap, &s.facts, tool, black_box(&reqs), &s.session)
                    .allowed()
            })
        });
        g.finish();
    }
}

/// Nanoseconds per call of `f` over one round of `n` calls.
fn per_call_ns(n: u32, f: &mut impl FnMut() -> bool) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        black_box(f());
    }
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

/// Calls per round so that one round of `f` takes about 10 ms.
fn calls_per_round(f: &mut impl FnMut() -> bool) -> u32 {
    let once = per_call_ns(10, f).max(1.0);
    (10e6 / once).clamp(1.0, 100_000.0) as u32
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The same run's ratios: rounds of the three interleaved, so that load on the machine hits
/// all three alike; the median round of each.
fn ratios(s: &Setup) {
    const ROUNDS: usize = 21;
    let authorizer = Authorizer::new();
    println!("\nratios (median of {ROUNDS} interleaved rounds of ~10 ms each):");
    for (tool, req) in requests(&s.session) {
        let (request, entities) = bare_inputs(&s.snap, &s.facts, tool, &req);
        let slice = s.snap.slices.for_action(req.action.as_str(), &s.snap.set);
        let reqs = [req];
        let mut bare_f = || bare(&authorizer, &s.snap.set, &request, &entities);
        // The floor under slicing: Cedar alone on the policies of the request's action.
        let mut sliced_f = || bare(&authorizer, slice, &request, &entities);
        let mut uncached_f = || {
            s.decider
                .probe_uncached(&s.snap, &s.facts, tool, &reqs, &s.session)
                .allowed()
        };
        let mut cached_f = || {
            s.decider
                .decide(&s.snap, &s.facts, tool, &reqs, &s.session)
                .allowed()
        };
        let n = [
            calls_per_round(&mut bare_f),
            calls_per_round(&mut uncached_f),
            calls_per_round(&mut cached_f),
            calls_per_round(&mut sliced_f),
        ];
        let (mut b, mut u, mut c, mut sl) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            b.push(per_call_ns(n[0], &mut bare_f));
            u.push(per_call_ns(n[1], &mut uncached_f));
            c.push(per_call_ns(n[2], &mut cached_f));
            sl.push(per_call_ns(n[3], &mut sliced_f));
        }
        let (b, u, c, sl) = (
            median(&mut b),
            median(&mut u),
            median(&mut c),
            median(&mut sl),
        );
        println!(
            "{tool:>13}: bare {:>9.2} us | uncached {:>9.2} us ({:.2}x bare) | cached {:>9.2} us ({:.2}x bare) | bare on the action's slice ({} policies) {:>9.2} us",
            b / 1e3,
            u / 1e3,
            u / b,
            c / 1e3,
            c / b,
            slice.policies().count(),
            sl / 1e3
        );
    }
}

fn main() {
    let s = setup();
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    benches(&mut c, &s);
    c.final_summary();
    ratios(&s);
}
