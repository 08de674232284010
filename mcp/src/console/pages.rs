//! The console's HTML, rendered by maud (every interpolated value is escaped; commands, paths,
//! patches and names are attacker-controlled text). No inline script or style: the CSP allows
//! only the embedded `console.css` and `console.js`; the chart's data travels in a `data-`
//! attribute, and every page works without JavaScript except the chart.

use super::data::{
    DecisionFilter, Decisions, Explained, Hold, Identity, Operation, Policies, Processes,
};
use maud::{DOCTYPE, Markup, html};

/// The signed-in session of a request.
#[derive(Clone)]
pub(crate) struct Signed {
    pub(crate) identity: Identity,
    pub(crate) operator: bool,
    pub(crate) csrf: String,
}

/// How often the approvals queue reloads itself (a meta refresh; no script needed).
const QUEUE_REFRESH_SECS: u32 = 3;

/// A path segment safe to put in a link as it is (server-minted ids); anything else gets no link.
fn plain_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn layout(
    title: &str,
    who: Option<&Signed>,
    live: bool,
    refresh: Option<u32>,
    body: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(s) = refresh {
                    meta http-equiv="refresh" content=(s);
                }
                title { (title) " · CodeSpace console" }
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                header {
                    span.brand { "CodeSpace console" }
                    @if !live { span.badge { "read-only" } }
                    @if let Some(s) = who {
                        @if s.operator {
                            nav {
                                a href="/console/approvals" { "Approvals" }
                                a href="/console/decisions" { "Decisions" }
                                a href="/console/policies" { "Policies" }
                                a href="/console/processes" { "Processes & operations" }
                            }
                        }
                        form.signout method="post" action="/console/sign-out" {
                            span.who { "signed in as " b { (s.identity.name) } }
                            input type="hidden" name="csrf" value=(s.csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The sign-in form.
pub(crate) fn sign_in(error: Option<&str>, live: bool) -> Markup {
    layout(
        "Sign in",
        None,
        live,
        None,
        html! {
            @if let Some(e) = error { p.error { (e) } }
            form.signin method="post" action="/console/sign-in" {
                label for="token" { "Bearer token of a configured client" }
                input #token type="password" name="token" autocomplete="current-password" required;
                button type="submit" { "Sign in" }
            }
            p.note { "The console accepts the same identities as the HTTP transport. Operators (console.operators) see the pages; others get 403." }
        },
    )
}

/// 403 for a signed-in client that is not an operator: no queue, nothing else.
pub(crate) fn forbidden(s: &Signed, live: bool) -> Markup {
    layout(
        "Not an operator",
        Some(s),
        live,
        None,
        html! {
            p { "This client is not named in " code { "console.operators" } ": it sees no approvals queue and no operator page." }
        },
    )
}

/// A short message page (refusals, errors).
pub(crate) fn message(s: &Signed, live: bool, title: &str, text: &str) -> Markup {
    layout(
        title,
        Some(s),
        live,
        None,
        html! {
            p.error { (text) }
            p { a href="/console/approvals" { "Back to the approvals queue" } }
        },
    )
}

/// Lines of a diff or patch, each classed by its first character.
fn diff_block(text: &str) -> Markup {
    html! {
        pre.diff {
            @for line in text.lines() {
                @let class = match line.as_bytes().first() {
                    Some(b'+') if !line.starts_with("+++") => "add",
                    Some(b'-') if !line.starts_with("---") => "del",
                    Some(b'@') => "hunk",
                    Some(b'*') => "meta",
                    _ => "ctx",
                };
                span class=(class) { (line) } "\n"
            }
        }
    }
}

/// The approvals queue.
pub(crate) fn approvals(s: &Signed, live: bool, holds: &[Hold]) -> Markup {
    layout(
        "Approvals",
        Some(s),
        live,
        Some(QUEUE_REFRESH_SECS),
        html! {
            p.note { "Pending holds, oldest first. The page reloads every " (QUEUE_REFRESH_SECS) " s. A grant or deny is decided by Cedar as "
                code { "approval_resolve" } " over channel " code { "web" } " with you as resolver." }
            @if holds.is_empty() { p #no-holds { "No hold is waiting." } }
            @for h in holds {
                section.hold id=(format!("hold-{}", h.id)) data-approval=(h.id) {
                    h2 { code { (h.id) } " " span.tool { (h.tool) } " on " code { (h.workspace) } }
                    table.facts {
                        tr { th { "asked by" } td { (h.requested_by) " (" (h.transport) ")" } }
                        tr { th { "created" } td { (h.created) } }
                        tr { th { "expires" } td { (h.expires) } }
                        tr { th { "summary" } td { (h.summary) } }
                        @if let Some(c) = &h.command { tr { th { "command" } td { pre.command { (c) } } } }
                        @if let Some(c) = &h.cwd { tr { th { "cwd" } td { code { (c) } } } }
                        @if h.tool == "exec_command" {
                            tr { th { "env names" } td {
                                @if h.env_names.is_empty() { "(none)" }
                                @for n in &h.env_names { code { (n) } " " }
                            } }
                        }
                        @for (k, v) in &h.other { tr { th { (k) } td { code { (v) } } } }
                    }
                    @if let Some(p) = &h.patch {
                        h3 { "Patch" }
                        (diff_block(p))
                    }
                    @if !h.versions.is_empty() {
                        h3 { "File versions at hold time" }
                        table.versions {
                            tr { th { "path" } th { "version" } }
                            @for (p, v) in &h.versions { tr { td { code { (p) } } td { code { (v) } } } }
                        }
                    }
                    @if live && plain_id(&h.id) {
                        div.actions {
                            form method="post" action=(format!("/console/approvals/{}", h.id)) {
                                input type="hidden" name="csrf" value=(s.csrf);
                                input type="hidden" name="decision" value="grant";
                                button.grant type="submit" name="grant" { "Grant" }
                            }
                            form method="post" action=(format!("/console/approvals/{}", h.id)) {
                                input type="hidden" name="csrf" value=(s.csrf);
                                input type="hidden" name="decision" value="deny";
                                button.deny type="submit" name="deny" { "Deny" }
                            }
                        }
                    }
                }
            }
        },
    )
}

fn selected(f: &Option<String>, v: &str) -> bool {
    f.as_deref() == Some(v)
}

/// The decisions timeline with its filters and chart.
pub(crate) fn decisions(s: &Signed, live: bool, f: &DecisionFilter, d: &Decisions) -> Markup {
    let chart = serde_json::to_string(&d.buckets).unwrap_or_else(|_| "[]".into());
    let (mut allow, mut deny, mut hold) = (0u64, 0u64, 0u64);
    for b in &d.buckets {
        allow += b.allow;
        deny += b.deny;
        hold += b.hold;
    }
    let val = |o: &Option<String>| o.clone().unwrap_or_default();
    layout(
        "Decisions",
        Some(s),
        live,
        None,
        html! {
            form.filters method="get" action="/console/decisions" {
                label { "tool " input name="tool" value=(val(&f.tool)); }
                label { "result "
                    select name="result" {
                        option value="" { "any" }
                        option value="allow" selected[selected(&f.result, "allow")] { "allow" }
                        option value="deny" selected[selected(&f.result, "deny")] { "deny" }
                        option value="hold" selected[selected(&f.result, "hold")] { "hold" }
                    }
                }
                label { "profile " input name="profile" value=(val(&f.profile)); }
                label { "since (UTC) " input name="since" placeholder="2026-12-02T08:00" value=(val(&f.since)); }
                label { "until (UTC) " input name="until" placeholder="(now)" value=(val(&f.until)); }
                button type="submit" { "Filter" }
            }
            @if let Some(e) = &d.error { p.error { (e) } }
            p.totals { "allow " b { (allow) } " · deny " b { (deny) } " · hold " b { (hold) } " (" (d.scanned) " rows read; default window: the last 24 h)" }
            div #chart.chart data-buckets=(chart) {
                noscript { "The chart needs JavaScript; the counts above and the table below do not." }
            }
            table.rows {
                tr { th { "time" } th { "result" } th { "tool" } th { "action" } th { "profile" } th { "workspace" } th { "client" } th { "subject" } th { "policies" } }
                @for (r, kind) in &d.rows {
                    tr class=(kind) {
                        td { @if plain_id(&r.decision_id) { a href=(format!("/console/decisions/{}", r.decision_id)) { (codespace_engine::wire::rfc3339_ms(r.at_ms)) } } @else { (codespace_engine::wire::rfc3339_ms(r.at_ms)) } }
                        td { (kind) }
                        td { (r.tool) }
                        td { (r.action) }
                        td { (r.profile) }
                        td { (r.workspace) }
                        td { (r.client.as_deref().unwrap_or("-")) }
                        td.subject { (r.subject) }
                        td { @for p in &r.policy_ids { code { (p) } " " } @if r.default_deny { em { "default deny" } } }
                    }
                }
            }
        },
    )
}

/// One decision: its rows and their explanations.
pub(crate) fn decision(s: &Signed, live: bool, id: &str, rows: &[Explained]) -> Markup {
    layout(
        "Decision",
        Some(s),
        live,
        None,
        html! {
            p { code { (id) } " · " a href="/console/decisions" { "all decisions" } }
            @if rows.is_empty() { p.error { "No such decision in the store." } }
            @for e in rows {
                section.decision {
                    h2 { "#" (e.row.sub_index) " " (e.row.action) " → " (e.row.decision) }
                    table.facts {
                        tr { th { "time" } td { (codespace_engine::wire::rfc3339_ms(e.row.at_ms)) } }
                        tr { th { "tool" } td { (e.row.tool) } }
                        tr { th { "workspace" } td { (e.row.workspace) " (profile " (e.row.profile) ")" } }
                        tr { th { "client" } td { (e.row.client.as_deref().unwrap_or("-")) " " (e.row.transport.as_deref().unwrap_or("")) } }
                        tr { th { "subject" } td { (e.row.subject) } }
                        tr { th { "determining policies" } td { @for p in &e.row.policy_ids { code { (p) } " " } @if e.row.default_deny { em { "default deny" } } } }
                        tr { th { "reason" } td { (e.row.reason.as_deref().unwrap_or("-")) } }
                        tr { th { "policy set" } td { code { (e.row.policy_set_sha256) } } }
                        tr { th { "policy set signed by" } td { @match &e.row.policy_signer {
                            Some(sg) => { (sg.principal) " (" (sg.key) ")" }
                            None => { "(not signed, or no record of the set)" }
                        } } }
                    }
                    h3 { "Explanation under the policies in force" }
                    pre.explain { (e.explanation) }
                }
            }
        },
    )
}

/// The policy set in force, hit counts, unused policies and shadow flips.
pub(crate) fn policies(s: &Signed, live: bool, p: &Policies) -> Markup {
    let unused: Vec<&str> = p
        .policies
        .iter()
        .filter(|x| x.hits == 0)
        .map(|x| x.id.as_str())
        .collect();
    layout(
        "Policies",
        Some(s),
        live,
        None,
        html! {
            table.facts {
                tr { th { "set" } td { code { (p.sha256) } } }
                tr { th { "signed by" } td { (p.signer.as_deref().unwrap_or("(not signed: policies.require_signature is off)")) } }
                tr { th { "loaded" } td { (p.loaded_at) } }
                tr { th { "policies" } td { (p.policies.len()) } }
                tr { th { "log rows read" } td { (p.scanned) } }
            }
            h2 { "In force" }
            table.rows {
                tr { th { "policy" } th { "effect" } th { "file" } th { "hits" } th { "reason" } }
                @for x in &p.policies {
                    tr class=(if x.hits == 0 { "unused" } else { "" }) {
                        td { code { (x.id) } }
                        td { (if x.forbid { "forbid" } else { "permit" }) }
                        td { (x.file) ":" (x.line) }
                        td.num { (x.hits) }
                        td { (x.reason.as_deref().unwrap_or("")) }
                    }
                }
            }
            h2 { "Unused (no hit in the rows read)" }
            @if unused.is_empty() { p { "Every policy determined at least one decision." } }
            ul { @for u in &unused { li { code { (u) } } } }
            h2 { "Shadow set" }
            @match &p.shadow {
                None => p { "No shadow set is loaded." },
                Some((sha, flips)) => {
                    p { "Shadow set " code { (sha) } ": " (flips.len()) " decisions it would answer otherwise (newest first)." }
                    table.rows {
                        tr { th { "time" } th { "tool" } th { "subject" } th { "live" } th { "shadow" } th { "shadow policies" } }
                        @for r in flips {
                            tr {
                                td { (codespace_engine::wire::rfc3339_ms(r.at_ms)) }
                                td { (r.tool) }
                                td.subject { (r.subject) }
                                td { (r.decision) }
                                td { (r.shadow_decision.as_deref().unwrap_or("-")) }
                                td { @for id in r.shadow_policy_ids.iter().flatten() { code { (id) } " " } }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// Live processes per workspace and recent operations.
pub(crate) fn processes(s: &Signed, live: bool, p: &Processes) -> Markup {
    layout(
        "Processes & operations",
        Some(s),
        live,
        None,
        html! {
            h2 { "Live processes" }
            @for (ws, rows) in &p.live {
                h3 { "workspace " code { (ws) } }
                @if rows.is_empty() { p { "none" } }
                @else {
                    table.rows {
                        tr { th { "process" } th { "program" } th { "pid" } th { "tty" } th { "started" } th { "operation" } }
                        @for r in rows {
                            tr {
                                td { code { (r.process_id) } }
                                td { (r.program) }
                                td { (r.pid.map(|p| p.to_string()).unwrap_or_default()) }
                                td { (r.tty) }
                                td { (codespace_engine::wire::rfc3339_ms(r.started_ms)) }
                                td { code { (r.operation_id) } }
                            }
                        }
                    }
                }
            }
            h2 { "Recent operations" }
            table.rows {
                tr { th { "operation" } th { "tool" } th { "workspace" } th { "client" } th { "status" } th { "created" } }
                @for o in &p.operations {
                    tr {
                        td { @if plain_id(&o.operation_id) { a href=(format!("/console/operations/{}", o.operation_id)) { code { (o.operation_id) } } } @else { code { (o.operation_id) } } }
                        td { (o.tool) }
                        td { (o.workspace) }
                        td { (o.client.as_deref().unwrap_or("-")) }
                        td { (o.status) }
                        td { (codespace_engine::wire::rfc3339_ms(o.created_ms)) }
                    }
                }
            }
        },
    )
}

/// One operation and its ledger diff.
pub(crate) fn operation(s: &Signed, live: bool, id: &str, o: &Operation) -> Markup {
    layout(
        "Operation",
        Some(s),
        live,
        None,
        html! {
            p { code { (id) } " · " a href="/console/processes" { "all operations" } }
            @if let Some(r) = &o.row {
                table.facts {
                    tr { th { "tool" } td { (r.tool) } }
                    tr { th { "workspace" } td { (r.workspace) } }
                    tr { th { "client" } td { (r.client.as_deref().unwrap_or("-")) } }
                    tr { th { "status" } td { (r.status) } }
                    tr { th { "created" } td { (codespace_engine::wire::rfc3339_ms(r.created_ms)) } }
                }
            } @else { p.error { "No such operation in the store." } }
            @if !o.files.is_empty() {
                h2 { "Files" }
                table.rows {
                    tr { th { "path" } th { "kind" } th { "before" } th { "after" } th { "" } }
                    @for f in &o.files {
                        tr {
                            td { code { (f.path) } @if let Some(from) = &f.from { " (from " code { (from) } ")" } }
                            td { (f.kind) }
                            td { code { (f.before_version.as_deref().unwrap_or("-")) } }
                            td { code { (f.after_version.as_deref().unwrap_or("-")) } }
                            td { @if f.withheld { em { "withheld" } } }
                        }
                    }
                }
                h2 { "Diff" }
                (diff_block(&o.diff))
            } @else if o.row.is_some() { p { "No ledger entry for this operation (a command, or recorded before the ledger)." } }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_ids_become_links() {
        assert!(plain_id("appr-0a1b-2c3d"));
        assert!(plain_id("op-1.2_3"));
        for bad in ["", "../x", "a/b", "a?b", "a b", "\"x", "é"] {
            assert!(!plain_id(bad), "{bad}");
        }
    }

    #[test]
    fn diff_lines_are_escaped_and_classed() {
        let m = diff_block("+<b>x</b>\n-y\n@@ -1 +1 @@\n ctx").into_string();
        assert!(
            m.contains("<span class=\"add\">+&lt;b&gt;x&lt;/b&gt;</span>"),
            "{m}"
        );
        assert!(m.contains("<span class=\"del\">-y</span>"), "{m}");
        assert!(m.contains("<span class=\"hunk\">"), "{m}");
        assert!(!m.contains("<b>"), "{m}");
    }
}
