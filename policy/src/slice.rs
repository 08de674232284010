//! The policy set sliced by action: for each action of the schema, the policies whose action
//! scope can match it. Cedar evaluates every policy of the set it is given, scope first; a
//! policy whose action scope cannot match the request's action is false before its conditions
//! run (no error can come from it), so evaluating the slice gives the same decision, reasons
//! and errors as evaluating the whole set, for a fraction of the work (issue 34).

use cedar_policy::{ActionConstraint, EntityUid, Policy, PolicySet, Schema};
use std::collections::{HashMap, HashSet};

/// The slices of one policy set, keyed by action name (`read`, `exec_command`, ...).
#[derive(Debug, Clone, Default)]
pub struct ActionSlices {
    by_action: HashMap<String, Slice>,
}

/// One action's policies and the action entities their evaluation can look up.
#[derive(Debug, Clone)]
struct Slice {
    set: PolicySet,
    /// The action itself and every action its policies name as a literal (an `in` looks up
    /// its left side only, so these are all the action entities an evaluation can touch).
    actions: Vec<String>,
}

impl ActionSlices {
    /// Slices `set` for every action of `schema`. An action whose slice cannot be built (a
    /// template Cedar refuses to take twice, which cannot happen for a set that compiled) is
    /// left out: its requests are evaluated against the whole set.
    pub fn new(schema: &Schema, set: &PolicySet) -> ActionSlices {
        let hierarchy = schema.action_entities().ok();
        let mut by_action = HashMap::new();
        for action in schema.actions() {
            // The action itself and every group it is in: what `action in [..]` can match.
            let mut reach: HashSet<&EntityUid> = HashSet::from([action]);
            if let Some(ancestors) = hierarchy.as_ref().and_then(|h| h.ancestors(action)) {
                reach.extend(ancestors);
            }
            if let Some(slice) = slice_for(set, &reach) {
                let mut actions: Vec<String> = slice
                    .policies()
                    .flat_map(|p| body_action_literals(p, action))
                    .chain([action.id().unescaped().to_string()])
                    .collect();
                actions.sort();
                actions.dedup();
                by_action.insert(
                    action.id().unescaped().to_string(),
                    Slice {
                        set: slice,
                        actions,
                    },
                );
            }
        }
        ActionSlices { by_action }
    }

    /// The policies that can apply to `action`; the whole `set` for an action the schema did
    /// not name (its request fails validation anyway) or whose slice was not built.
    pub fn for_action<'a>(&'a self, action: &str, set: &'a PolicySet) -> &'a PolicySet {
        self.by_action.get(action).map_or(set, |s| &s.set)
    }

    /// The action entities evaluating `action`'s slice can look up (itself and the actions its
    /// policies name); None when `action` has no slice (then every action entity is needed).
    pub fn actions_needed(&self, action: &str) -> Option<&[String]> {
        self.by_action.get(action).map(|s| s.actions.as_slice())
    }
}

/// Whether `policy`'s action scope can match an action whose reach (itself and its groups) is
/// `reach`.
fn can_match(policy: &Policy, reach: &HashSet<&EntityUid>) -> bool {
    match policy.action_constraint() {
        ActionConstraint::Any => true,
        ActionConstraint::Eq(a) => reach.contains(&a),
        ActionConstraint::In(groups) => groups.iter().any(|g| reach.contains(g)),
    }
}

/// The action literals of `policy`'s conditions, by name: its literals less those of its action
/// scope (an `in` there looks up only the request's action).
fn body_action_literals(policy: &Policy, action: &EntityUid) -> Vec<String> {
    let mut scope: Vec<EntityUid> = match policy.action_constraint() {
        ActionConstraint::Any => Vec::new(),
        ActionConstraint::Eq(a) => vec![a],
        ActionConstraint::In(groups) => groups,
    };
    let mut out = Vec::new();
    for lit in policy.entity_literals() {
        if lit.type_name() != action.type_name() {
            continue;
        }
        match scope.iter().position(|s| *s == lit) {
            Some(i) => {
                scope.swap_remove(i);
            }
            None => out.push(lit.id().unescaped().to_string()),
        }
    }
    out
}

/// The policies of `set` that can match, static ones as they are and linked ones linked again
/// from their templates under the same ids.
fn slice_for(set: &PolicySet, reach: &HashSet<&EntityUid>) -> Option<PolicySet> {
    let mut slice = PolicySet::new();
    for policy in set.policies().filter(|p| can_match(p, reach)) {
        match (policy.template_id(), policy.template_links()) {
            (Some(tid), Some(links)) => {
                if slice.template(tid).is_none() {
                    slice.add_template(set.template(tid)?.clone()).ok()?;
                }
                slice.link(tid.clone(), policy.id().clone(), links).ok()?;
            }
            _ => slice.add(policy.clone()).ok()?,
        }
    }
    Some(slice)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    // The tests compare a slice's evaluation with the whole set's; nothing acts on either.
    #![allow(clippy::disallowed_methods)]

    use super::*;
    use cedar_policy::{Authorizer, Context, Entities, Request};

    const SCHEMA: &str = r#"
        entity P;
        entity R;
        action "all";
        action "group" in ["all"];
        action "read" in ["group"] appliesTo { principal: P, resource: R, context: { n: Long } };
        action "write" in ["all"] appliesTo { principal: P, resource: R, context: { n: Long } };
        action "other" appliesTo { principal: P, resource: R, context: { n: Long } };
    "#;

    const POLICIES: &str = r#"
        @id("any") permit(principal, action, resource) when { context.n == 1 };
        @id("eq-read") permit(principal, action == Action::"read", resource);
        @id("eq-write") forbid(principal, action == Action::"write", resource);
        @id("in-group") forbid(principal, action in Action::"group", resource) when { context.n == 2 };
        @id("in-all") permit(principal, action in [Action::"all"], resource) when { context.n == 3 };
        @id("in-list") permit(principal, action in [Action::"other", Action::"write"], resource);
        @id("lit") permit(principal, action == Action::"write", resource) when { Action::"other" in Action::"all" && context.n == 4 };
        @id("errs") forbid(principal, action == Action::"read", resource) when { context.n + 9223372036854775807 > 0 };
        @id("tpl") permit(principal == ?principal, action in Action::"group", resource);
    "#;

    fn set() -> (Schema, PolicySet) {
        let (schema, _) = Schema::from_cedarschema_str(SCHEMA).unwrap();
        let mut set: PolicySet = POLICIES.parse().unwrap();
        // Parsed policies get ids policy0..; rename by @id through a fresh set.
        let mut named = PolicySet::new();
        for p in set.policies() {
            let id = p.annotation("id").unwrap().to_string();
            named
                .add(p.new_id(cedar_policy::PolicyId::new(id)))
                .unwrap();
        }
        for t in set.templates() {
            let id = t.annotation("id").unwrap().to_string();
            named
                .add_template(t.new_id(cedar_policy::PolicyId::new(id)))
                .unwrap();
        }
        set = named;
        let p: EntityUid = r#"P::"p""#.parse().unwrap();
        set.link(
            cedar_policy::PolicyId::new("tpl"),
            cedar_policy::PolicyId::new("tpl[p]"),
            HashMap::from([(cedar_policy::SlotId::principal(), p)]),
        )
        .unwrap();
        (schema, set)
    }

    fn ids(s: &PolicySet) -> Vec<String> {
        let mut v: Vec<String> = s.policies().map(|p| p.id().to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn each_slice_holds_exactly_the_policies_whose_action_scope_can_match() {
        let (schema, set) = set();
        let slices = ActionSlices::new(&schema, &set);
        assert_eq!(
            ids(slices.for_action("read", &set)),
            ["any", "eq-read", "errs", "in-all", "in-group", "tpl[p]"]
        );
        assert_eq!(
            ids(slices.for_action("write", &set)),
            ["any", "eq-write", "in-all", "in-list", "lit"]
        );
        assert_eq!(ids(slices.for_action("other", &set)), ["any", "in-list"]);
        // Not an action of the schema: the whole set.
        assert_eq!(slices.for_action("nope", &set).policies().count(), 9);
        // The action entities each slice's evaluation can look up: itself, and the literals of
        // conditions (not of scopes).
        assert_eq!(slices.actions_needed("read").unwrap(), ["read"]);
        assert_eq!(
            slices.actions_needed("write").unwrap(),
            ["all", "other", "write"]
        );
        assert!(slices.actions_needed("nope").is_none());
    }

    /// The property the slices exist for: the same decision, reasons and errors as the whole
    /// set over every entity, for every action, principal and context value the policies above
    /// tell apart, with only the action entities the slice needs.
    #[test]
    fn a_slice_decides_exactly_as_the_whole_set() {
        let (schema, set) = set();
        let slices = ActionSlices::new(&schema, &set);
        let entities = Entities::empty()
            .add_entities(schema.action_entities().unwrap(), Some(&schema))
            .unwrap();
        let authorizer = Authorizer::new();
        let mut compared = 0;
        for action in ["read", "write", "other"] {
            for principal in [r#"P::"p""#, r#"P::"q""#] {
                for n in [0_i64, 1, 2, 3, 4] {
                    let action_uid: EntityUid = format!(r#"Action::"{action}""#).parse().unwrap();
                    let ctx = Context::from_pairs([(
                        "n".to_string(),
                        cedar_policy::RestrictedExpression::new_long(n),
                    )])
                    .unwrap();
                    let req = Request::new(
                        principal.parse().unwrap(),
                        action_uid,
                        r#"R::"r""#.parse().unwrap(),
                        ctx,
                        Some(&schema),
                    )
                    .unwrap();
                    let whole = authorizer.is_authorized(&req, &set, &entities);
                    // The slice over only the action entities it needs.
                    let needed = slices.actions_needed(action).unwrap();
                    let few = Entities::empty()
                        .add_entities(
                            schema
                                .action_entities()
                                .unwrap()
                                .iter()
                                .filter(|e| {
                                    needed
                                        .iter()
                                        .any(|n| n.as_str() == e.uid().id().unescaped())
                                })
                                .cloned(),
                            Some(&schema),
                        )
                        .unwrap();
                    let part =
                        authorizer.is_authorized(&req, slices.for_action(action, &set), &few);
                    let view = |r: &cedar_policy::Response| {
                        let mut reasons: Vec<String> =
                            r.diagnostics().reason().map(|p| p.to_string()).collect();
                        reasons.sort();
                        let mut errors: Vec<String> =
                            r.diagnostics().errors().map(|e| e.to_string()).collect();
                        errors.sort();
                        (r.decision(), reasons, errors)
                    };
                    assert_eq!(view(&whole), view(&part), "{action} {principal} n={n}");
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, 30);
    }
}
