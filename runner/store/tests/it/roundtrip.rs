//! Round trips through every table of the store, plus the key-claim and journal rules.

use crate::common;

use codespace_store::{
    DecisionQuery, JournalEntry, JournalSeal, KeyClaim, KeyScope, Store, StoreError, now_ms,
};
use common::{decision, operation, process};
use serde_json::json;

#[test]
fn decisions_round_trip_in_time_then_sub_index_order() {
    let store = Store::open_in_memory().unwrap();
    let mut rows = vec![
        decision("d2", 1, 200, "deny"),
        decision("d1", 0, 100, "allow"),
        decision("d2", 0, 200, "allow"),
    ];
    rows[0].errors = vec!["type error".to_owned()];
    rows[0].transport = Some("stdio".to_owned());
    store.insert_decisions(&rows).unwrap();

    let got = store.query_decisions(&DecisionQuery::default()).unwrap();
    // `seq` is the stored position: increasing in insertion order.
    assert_eq!(got.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![2, 3, 1]);
    let got: Vec<_> = got
        .into_iter()
        .map(|r| codespace_store::DecisionRow { seq: 0, ..r })
        .collect();
    assert_eq!(got, vec![rows[1].clone(), rows[2].clone(), rows[0].clone()]);
}

#[test]
fn replayable_rows_keep_request_path_kind_reason_and_shadow_and_filter_by_them() {
    let store = Store::open_in_memory().unwrap();
    let mut a = decision("d1", 0, 100, "allow");
    a.request = Some(json!({"v": 1, "request": {"action": "read", "path": "src/lib.rs"}}));
    a.path = Some("src/lib.rs".into());
    a.reason = Some("permitted by read-only.permit.fs-read".into());
    a.policy_ids = vec!["read-only.permit.fs-read".into()];
    a.shadow_decision = Some("deny".into());
    a.shadow_policy_ids = Some(vec!["base.forbid.src".into()]);
    let mut b = decision("d2", 0, 200, "deny");
    b.client = Some("ci-bot".into());
    b.kind = Some("add".into());
    b.shadow_decision = Some("deny".into());
    b.shadow_policy_ids = Some(vec![]);
    store.insert_decisions(&[a.clone(), b.clone()]).unwrap();

    let all = store.query_decisions(&DecisionQuery::default()).unwrap();
    assert_eq!(all[0].request, a.request);
    assert_eq!(all[0].shadow_policy_ids, a.shadow_policy_ids);
    assert_eq!(all[1].kind.as_deref(), Some("add"));
    let q = |f: &dyn Fn(&mut DecisionQuery)| {
        let mut q = DecisionQuery::default();
        f(&mut q);
        store
            .query_decisions(&q)
            .unwrap()
            .into_iter()
            .map(|r| r.decision_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(q(&|q| q.client = Some("ci-bot".into())), vec!["d2"]);
    assert_eq!(
        q(&|q| q.policy = Some("read-only.permit.fs-read".into())),
        vec!["d1"]
    );
    // A shadow-only policy id matches too.
    assert_eq!(
        q(&|q| q.policy = Some("base.forbid.src".into())),
        vec!["d1"]
    );
    assert_eq!(q(&|q| q.shadow_flips = true), vec!["d1"]);
    assert_eq!(q(&|q| q.decision_id = Some("d2".into())), vec!["d2"]);
    assert_eq!(q(&|q| q.after_seq = Some(all[0].seq)), vec!["d2"]);
    assert_eq!(q(&|q| q.until_ms = Some(150)), vec!["d1"]);
}

#[test]
fn decisions_insert_is_all_or_nothing() {
    let store = Store::open_in_memory().unwrap();
    // The second row repeats (decision_id, sub_index), so the batch must fail as a whole.
    let rows = vec![
        decision("d1", 0, 100, "allow"),
        decision("d1", 0, 101, "deny"),
    ];
    assert!(store.insert_decisions(&rows).is_err());
    assert!(
        store
            .query_decisions(&DecisionQuery::default())
            .unwrap()
            .is_empty()
    );
}

#[test]
fn decisions_reject_a_verdict_other_than_allow_or_deny() {
    let store = Store::open_in_memory().unwrap();
    let err = store
        .insert_decisions(&[decision("d1", 0, 100, "maybe")])
        .unwrap_err();
    assert!(matches!(err, StoreError::Sqlite(_)), "{err}");
}

#[test]
fn decisions_query_filters_by_since_decision_workspace_tool_and_limit() {
    let store = Store::open_in_memory().unwrap();
    let mut other_ws = decision("d4", 0, 400, "deny");
    other_ws.workspace = "other".to_owned();
    let mut other_tool = decision("d5", 0, 500, "allow");
    other_tool.tool = "exec_command".to_owned();
    store
        .insert_decisions(&[
            decision("d1", 0, 100, "allow"),
            decision("d2", 0, 200, "deny"),
            decision("d3", 0, 300, "allow"),
            other_ws,
            other_tool,
        ])
        .unwrap();
    let ids = |q: DecisionQuery| -> Vec<String> {
        store
            .query_decisions(&q)
            .unwrap()
            .into_iter()
            .map(|r| r.decision_id)
            .collect()
    };

    let since = DecisionQuery {
        since_ms: Some(200),
        ..Default::default()
    };
    assert_eq!(ids(since.clone()), ["d2", "d3", "d4", "d5"]);
    let deny = DecisionQuery {
        decision: Some("deny".to_owned()),
        ..Default::default()
    };
    assert_eq!(ids(deny), ["d2", "d4"]);
    let since_allow = DecisionQuery {
        decision: Some("allow".to_owned()),
        ..since.clone()
    };
    assert_eq!(ids(since_allow), ["d3", "d5"]);
    let ws = DecisionQuery {
        workspace: Some("other".to_owned()),
        ..Default::default()
    };
    assert_eq!(ids(ws), ["d4"]);
    let tool = DecisionQuery {
        tool: Some("exec_command".to_owned()),
        ..Default::default()
    };
    assert_eq!(ids(tool), ["d5"]);
    let limited = DecisionQuery {
        limit: Some(2),
        ..since
    };
    assert_eq!(ids(limited), ["d2", "d3"]);
    // Newest first: the limit keeps the newest rows.
    let newest = DecisionQuery {
        limit: Some(2),
        newest_first: true,
        ..Default::default()
    };
    assert_eq!(ids(newest), ["d5", "d4"]);
}

#[test]
fn events_round_trip_filter_by_kind_and_return_newest_last() {
    let store = Store::open_in_memory().unwrap();
    let before = now_ms();
    let a = store
        .insert_event("startup_probe", &json!({"landlock": 6}))
        .unwrap();
    let b = store
        .insert_event("policy_reload", &json!({"ok": true}))
        .unwrap();
    let c = store
        .insert_event("policy_reload", &json!({"ok": false, "why": "parse"}))
        .unwrap();
    assert!(a < b && b < c);

    let all = store.events(None, 10).unwrap();
    assert_eq!(all.iter().map(|e| e.id).collect::<Vec<_>>(), [a, b, c]);
    assert_eq!(all[0].kind, "startup_probe");
    assert_eq!(all[0].detail, json!({"landlock": 6}));
    assert!(all[0].at_ms >= before);

    let reloads = store.events(Some("policy_reload"), 10).unwrap();
    assert_eq!(reloads.iter().map(|e| e.id).collect::<Vec<_>>(), [b, c]);
    // The limit keeps the newest rows, still ordered newest last.
    let newest = store.events(None, 2).unwrap();
    assert_eq!(newest.iter().map(|e| e.id).collect::<Vec<_>>(), [b, c]);
    assert_eq!(newest[1].detail, json!({"ok": false, "why": "parse"}));
}

#[test]
fn operations_round_trip_finish_and_unfinished_list() {
    let store = Store::open_in_memory().unwrap();
    let op1 = operation("op1", "default", "apply_patch", Some("k1"));
    let mut op2 = operation("op2", "default", "exec_command", None);
    op2.created_ms = 2_000;
    assert_eq!(
        store.create_operation(&op1, None).unwrap(),
        KeyClaim::Created
    );
    assert_eq!(
        store.create_operation(&op2, None).unwrap(),
        KeyClaim::Created
    );
    assert_eq!(store.operation_by_id("op1").unwrap(), Some(op1.clone()));
    assert_eq!(store.operation_by_id("nope").unwrap(), None);
    assert_eq!(
        store.unfinished_operations().unwrap(),
        vec![op1.clone(), op2.clone()]
    );

    let result = json!({"status": "applied", "files": ["a.txt"]});
    let before = now_ms();
    store
        .finish_operation("op1", "applied", Some(&result))
        .unwrap();
    let done = store.operation_by_id("op1").unwrap().unwrap();
    assert_eq!(done.status, "applied");
    assert_eq!(done.result, Some(result));
    assert!(done.finished_ms.unwrap() >= before);
    assert_eq!(store.unfinished_operations().unwrap(), vec![op2]);

    let err = store.finish_operation("nope", "applied", None).unwrap_err();
    assert!(matches!(err, StoreError::OperationNotFound(ref id) if id == "nope"));
}

fn scope(client: &str, registration: &str, expires_ms: i64) -> KeyScope {
    KeyScope {
        client: client.to_owned(),
        registration: registration.to_owned(),
        expires_ms,
    }
}

#[test]
fn key_claim_is_existing_only_in_the_same_client_registration_and_tool() {
    let store = Store::open_in_memory().unwrap();
    let far = now_ms() + 3_600_000;
    let alice = scope("alice", "reg-a", far);
    let first = operation("op1", "default", "apply_patch", Some("retry-1"));
    assert_eq!(
        store.create_operation(&first, Some(&alice)).unwrap(),
        KeyClaim::Created
    );

    let mut again = operation("op2", "default", "apply_patch", Some("retry-1"));
    again.fingerprint = "different".to_owned();
    match store.create_operation(&again, Some(&alice)).unwrap() {
        KeyClaim::Existing(row) => assert_eq!(*row, first),
        KeyClaim::Created => panic!("same (client, registration, tool, key) must not insert"),
    }
    assert_eq!(store.operation_by_id("op2").unwrap(), None);

    // Another client, another registration of the same workspace id, another tool: new.
    let bob = operation("op3", "default", "apply_patch", Some("retry-1"));
    assert_eq!(
        store
            .create_operation(&bob, Some(&scope("bob", "reg-a", far)))
            .unwrap(),
        KeyClaim::Created
    );
    let other_tree = operation("op4", "default", "apply_patch", Some("retry-1"));
    assert_eq!(
        store
            .create_operation(&other_tree, Some(&scope("alice", "reg-b", far)))
            .unwrap(),
        KeyClaim::Created
    );
    let other_tool = operation("op5", "default", "exec_command", Some("retry-1"));
    assert_eq!(
        store.create_operation(&other_tool, Some(&alice)).unwrap(),
        KeyClaim::Created
    );

    let now = now_ms();
    let ids = |client: &str| -> Vec<(String, String)> {
        store
            .keyed_operations(client, "retry-1", now)
            .unwrap()
            .into_iter()
            .map(|(reg, r)| (reg, r.operation_id))
            .collect()
    };
    let mut alice_ids = ids("alice");
    alice_ids.sort();
    assert_eq!(
        alice_ids,
        [
            ("reg-a".to_owned(), "op1".to_owned()),
            ("reg-a".to_owned(), "op5".to_owned()),
            ("reg-b".to_owned(), "op4".to_owned())
        ]
    );
    assert_eq!(ids("bob"), [("reg-a".to_owned(), "op3".to_owned())]);
    assert!(ids("carol").is_empty());
    assert!(
        store
            .keyed_operations("alice", "unused", now)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn an_expired_key_is_unknown_and_claimed_again() {
    let store = Store::open_in_memory().unwrap();
    let past = scope("alice", "reg-a", now_ms() - 1);
    let first = operation("op1", "default", "apply_patch", Some("k"));
    assert_eq!(
        store.create_operation(&first, Some(&past)).unwrap(),
        KeyClaim::Created
    );
    assert!(
        store
            .keyed_operations("alice", "k", now_ms())
            .unwrap()
            .is_empty()
    );
    let live = scope("alice", "reg-a", now_ms() + 60_000);
    let second = operation("op2", "default", "apply_patch", Some("k"));
    assert_eq!(
        store.create_operation(&second, Some(&live)).unwrap(),
        KeyClaim::Created
    );
    let got = store.keyed_operations("alice", "k", now_ms()).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1.operation_id, "op2");
    // The first operation is still there by id.
    assert!(store.operation_by_id("op1").unwrap().is_some());
    // Without a scope the key is only a label: nothing is claimed.
    let label = operation("op3", "default", "apply_patch", Some("k"));
    assert_eq!(
        store.create_operation(&label, None).unwrap(),
        KeyClaim::Created
    );
    assert_eq!(
        store
            .keyed_operations("alice", "k", now_ms())
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn registrations_are_per_workspace_and_root() {
    let store = Store::open_in_memory().unwrap();
    let a = store
        .register_workspace("default", "1:100", "reg-1")
        .unwrap();
    assert_eq!(a, "reg-1");
    // Same id, same root: the same registration, whatever fresh id is offered.
    assert_eq!(
        store
            .register_workspace("default", "1:100", "reg-2")
            .unwrap(),
        "reg-1"
    );
    // Same id bound to another root: a new registration.
    assert_eq!(
        store
            .register_workspace("default", "1:200", "reg-3")
            .unwrap(),
        "reg-3"
    );
    // Another id on the first root: its own registration.
    assert_eq!(
        store.register_workspace("other", "1:100", "reg-4").unwrap(),
        "reg-4"
    );
}

#[test]
fn operations_without_key_never_collide_but_duplicate_ids_fail() {
    let store = Store::open_in_memory().unwrap();
    let a = operation("op1", "default", "exec_command", None);
    let b = operation("op2", "default", "exec_command", None);
    assert_eq!(store.create_operation(&a, None).unwrap(), KeyClaim::Created);
    assert_eq!(store.create_operation(&b, None).unwrap(), KeyClaim::Created);
    assert!(store.create_operation(&a, None).is_err());
}

#[test]
fn operation_events_round_trip_in_insertion_order() {
    let store = Store::open_in_memory().unwrap();
    store
        .create_operation(&operation("op1", "default", "apply_patch", None), None)
        .unwrap();
    store
        .add_operation_event("op1", "planned", None, None)
        .unwrap();
    store
        .add_operation_event(
            "op1",
            "failed",
            Some("failed_rolled_back"),
            Some("disk full"),
        )
        .unwrap();
    let events = store.operation_events("op1").unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].name, "planned");
    assert_eq!(
        (events[0].status.as_deref(), events[0].reason.as_deref()),
        (None, None)
    );
    assert_eq!(events[1].name, "failed");
    assert_eq!(events[1].status.as_deref(), Some("failed_rolled_back"));
    assert_eq!(events[1].reason.as_deref(), Some("disk full"));
    assert!(events[0].at_ms <= events[1].at_ms);

    let err = store
        .add_operation_event("nope", "planned", None, None)
        .unwrap_err();
    assert!(matches!(err, StoreError::OperationNotFound(_)));
    assert!(store.operation_events("nope").unwrap().is_empty());
}

#[test]
fn processes_round_trip_upsert_and_mark_unknown() {
    let store = Store::open_in_memory().unwrap();
    store
        .create_operation(&operation("op1", "default", "exec_command", None), None)
        .unwrap();
    let p1 = process("p1", "op1");
    let mut p2 = process("p2", "op1");
    p2.tty = false;
    p2.pid = None;
    store.upsert_process(&p1).unwrap();
    store.upsert_process(&p2).unwrap();
    assert_eq!(store.process("p1").unwrap(), Some(p1.clone()));
    assert_eq!(store.process("p2").unwrap(), Some(p2.clone()));
    assert_eq!(store.process("nope").unwrap(), None);

    let mut exited = p2.clone();
    exited.state = "exited".to_owned();
    exited.exit_code = Some(3);
    exited.termination = Some("exit".to_owned());
    exited.ended_ms = Some(9_000);
    store.upsert_process(&exited).unwrap();
    assert_eq!(store.process("p2").unwrap(), Some(exited.clone()));

    assert_eq!(store.mark_running_processes_unknown().unwrap(), 1);
    assert_eq!(store.process("p1").unwrap().unwrap().state, "unknown");
    assert_eq!(store.process("p2").unwrap(), Some(exited));
    assert_eq!(store.mark_running_processes_unknown().unwrap(), 0);
}

#[test]
fn owned_work_reports_its_owner_and_a_live_owners_processes_stay_running() {
    let store = Store::open_in_memory().unwrap();
    store
        .create_owned_operation(
            &operation("op-a", "default", "exec_command", None),
            None,
            Some("aaaaaaaaaaaaaaaa"),
        )
        .unwrap();
    store
        .create_owned_operation(
            &operation("op-b", "default", "exec_command", None),
            None,
            Some("bbbbbbbbbbbbbbbb"),
        )
        .unwrap();
    store
        .create_operation(&operation("op-old", "default", "exec_command", None), None)
        .unwrap();
    let owners: Vec<(String, Option<String>)> = store
        .unfinished_operations_with_owner()
        .unwrap()
        .into_iter()
        .map(|(row, owner)| (row.operation_id, owner))
        .collect();
    assert_eq!(owners.len(), 3);
    for (op, owner) in [
        ("op-a", Some("aaaaaaaaaaaaaaaa")),
        ("op-b", Some("bbbbbbbbbbbbbbbb")),
        ("op-old", None),
    ] {
        assert!(
            owners.contains(&(op.to_string(), owner.map(str::to_string))),
            "{op}: {owners:?}"
        );
    }
    store.journal_begin("op-a", "default", "reg", &[]).unwrap();
    let journals = store.open_journals().unwrap();
    assert_eq!(journals[0].instance_id.as_deref(), Some("aaaaaaaaaaaaaaaa"));

    for (p, op) in [("pa", "op-a"), ("pb", "op-b"), ("pold", "op-old")] {
        store.upsert_process(&process(p, op)).unwrap();
    }
    // Instance a still runs: its process is its own; b's and the unowned one are not.
    let changed = store
        .mark_running_processes_unknown_unless(|owner| owner == Some("aaaaaaaaaaaaaaaa"))
        .unwrap();
    assert_eq!(changed, 2);
    assert_eq!(store.process("pa").unwrap().unwrap().state, "running");
    assert_eq!(store.process("pb").unwrap().unwrap().state, "unknown");
    assert_eq!(store.process("pold").unwrap().unwrap().state, "unknown");
}

#[test]
fn a_dead_workers_running_processes_become_lost_and_ended_ones_stay() {
    let store = Store::open_in_memory().unwrap();
    store
        .create_operation(&operation("op1", "default", "exec_command", None), None)
        .unwrap();
    store.upsert_process(&process("p1", "op1")).unwrap();
    let mut ended = process("p2", "op1");
    ended.state = "exited".to_owned();
    ended.exit_code = Some(0);
    ended.ended_ms = Some(9_000);
    store.upsert_process(&ended).unwrap();
    let ids = ["p1".to_owned(), "p2".to_owned(), "nope".to_owned()];
    assert_eq!(store.mark_processes_lost(&ids).unwrap(), 1);
    let lost = store.process("p1").unwrap().unwrap();
    assert_eq!(lost.state, "lost");
    assert!(lost.ended_ms.is_some());
    assert_eq!(lost.exit_code, None);
    assert_eq!(store.process("p2").unwrap(), Some(ended));
    // Once lost, a start-up sweep leaves it alone (it is not running).
    assert_eq!(store.mark_running_processes_unknown().unwrap(), 0);
    assert_eq!(store.mark_processes_lost(&ids).unwrap(), 0);
}

#[test]
fn process_requires_an_existing_operation() {
    let store = Store::open_in_memory().unwrap();
    assert!(store.upsert_process(&process("p1", "missing-op")).is_err());
}

#[test]
fn journal_begin_open_clear() {
    let store = Store::open_in_memory().unwrap();
    for id in ["op1", "op2"] {
        store
            .create_operation(&operation(id, "default", "apply_patch", None), None)
            .unwrap();
    }
    let entries = vec![
        JournalEntry {
            path: "src/new/file.rs".to_owned(),
            before: None,
            mode: None,
            created_dirs: vec!["src/new".to_owned()],
        },
        JournalEntry {
            path: "empty.txt".to_owned(),
            before: Some(Vec::new()),
            mode: Some(0o100644),
            created_dirs: vec![],
        },
        JournalEntry {
            path: "bin.dat".to_owned(),
            before: Some(vec![0, 255, 10, 0, 13]),
            mode: Some(0o100755),
            created_dirs: vec![],
        },
    ];
    assert!(store.open_journals().unwrap().is_empty());
    store
        .journal_begin("op1", "default", "reg-1", &entries)
        .unwrap();
    store.journal_begin("op2", "ws2", "reg-2", &[]).unwrap();

    let open = store.open_journals().unwrap();
    assert_eq!(open.len(), 2);
    let j = open.iter().find(|j| j.operation_id == "op1").unwrap();
    assert_eq!(j.workspace, "default");
    assert_eq!(j.registration.as_deref(), Some("reg-1"));
    assert_eq!(j.seal, JournalSeal::Valid);
    // An empty file (Some(empty)) stays distinct from a missing one (None).
    assert_eq!(j.entries, entries);
    let second = open.iter().find(|j| j.operation_id == "op2").unwrap();
    assert_eq!(
        (second.workspace.as_str(), second.entries.len()),
        ("ws2", 0)
    );
    assert_eq!(second.seal, JournalSeal::Valid);

    let dup = store
        .journal_begin("op1", "default", "reg-1", &entries)
        .unwrap_err();
    assert!(matches!(dup, StoreError::JournalExists(_)), "{dup}");
    let missing = store
        .journal_begin("nope", "default", "reg-1", &[])
        .unwrap_err();
    assert!(
        matches!(missing, StoreError::OperationNotFound(_)),
        "{missing}"
    );

    store.journal_clear("op1").unwrap();
    let open = store.open_journals().unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].operation_id, "op2");
    store.journal_clear("op1").unwrap(); // clearing twice is fine
    store.journal_clear("op2").unwrap();
    assert!(store.open_journals().unwrap().is_empty());
    // A cleared journal can be begun again (e.g. a retried rollback of the same operation).
    store
        .journal_begin("op1", "default", "reg-1", &entries[..1])
        .unwrap();
    assert_eq!(store.open_journals().unwrap()[0].entries, entries[..1]);
}

#[test]
fn row_types_serialize_to_json() {
    let row = decision("d1", 0, 100, "allow");
    let value = serde_json::to_value(&row).unwrap();
    assert_eq!(value["decision_id"], "d1");
    assert_eq!(value["policy_ids"], json!(["policy0", "policy3"]));
    let back: codespace_store::DecisionRow = serde_json::from_value(value).unwrap();
    assert_eq!(back, row);
}

#[test]
fn store_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Store>();
}

#[test]
fn an_operation_minted_with_its_first_step_and_finished_with_its_last_in_one_commit_each() {
    let store = Store::open_in_memory().unwrap();
    let op = operation("op-m", "default", "exec_command", Some("k"));
    let sc = scope("c", "default", i64::MAX);
    assert_eq!(
        store
            .create_owned_operation_with_event(&op, Some(&sc), Some("aaaaaaaaaaaaaaaa"), "minted")
            .unwrap(),
        KeyClaim::Created
    );
    let names = |id: &str| -> Vec<(String, Option<String>, Option<String>)> {
        store
            .operation_events(id)
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.status, e.reason))
            .collect()
    };
    assert_eq!(names("op-m"), vec![("minted".to_owned(), None, None)]);
    // The key's replay adds no step: the claim finds the first operation.
    let again = operation("op-m2", "default", "exec_command", Some("k"));
    assert!(matches!(
        store
            .create_owned_operation_with_event(&again, Some(&sc), None, "minted")
            .unwrap(),
        KeyClaim::Existing(ref prev) if prev.operation_id == "op-m"
    ));
    assert!(names("op-m2").is_empty());
    assert_eq!(store.operation_by_id("op-m2").unwrap(), None);

    let result = json!({"process_id": "p"});
    store
        .finish_operation_with_event("op-m", "started", Some(&result), Some("why"))
        .unwrap();
    let done = store.operation_by_id("op-m").unwrap().unwrap();
    assert_eq!(
        (done.status.as_str(), done.result),
        ("started", Some(result))
    );
    assert_eq!(
        names("op-m"),
        vec![
            ("minted".to_owned(), None, None),
            (
                "finished".to_owned(),
                Some("started".to_owned()),
                Some("why".to_owned())
            ),
        ]
    );
    // An unknown operation: an error, and no step stored for it.
    let err = store
        .finish_operation_with_event("nope", "applied", None, None)
        .unwrap_err();
    assert!(matches!(err, StoreError::OperationNotFound(ref id) if id == "nope"));
    assert!(names("nope").is_empty());
}
