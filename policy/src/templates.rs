//! Policy templates linked from the config (`policies.templates`): each link expanded to its
//! linked policies with stable, readable ids (`team.tester[api]`), linked into the set with
//! Cedar's own `PolicySet::link`, and the links' canonical form that enters the set's hash.

use crate::config::TemplateLink;
use cedar_policy::{EntityId, EntityTypeName, EntityUid, PolicyId, PolicySet, SlotId};
use std::collections::{BTreeSet, HashMap};
use std::str::FromStr;

/// The schema's namespace, added to a slot value whose type names none.
const NAMESPACE: &str = "CodeSpace";

/// One linked policy a link makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expansion {
    /// The linked policy's id: the template's `@id` and the slot values' entity ids in brackets
    /// (`team.tester[api]`, `team.tester[tester,api]` when both slots are filled).
    pub id: String,
    /// The template's `@id`.
    pub template: String,
    /// `?principal`.
    pub principal: Option<EntityUid>,
    /// `?resource`.
    pub resource: Option<EntityUid>,
    /// The link's index in `policies.templates` (for diagnostics).
    pub index: usize,
}

impl Expansion {
    /// One line of the canonical form: id, template and slot values.
    fn canonical(&self) -> String {
        let show = |u: &Option<EntityUid>| u.as_ref().map(ToString::to_string).unwrap_or_default();
        format!(
            "link {}\0template {}\0principal {}\0resource {}",
            self.id,
            self.template,
            show(&self.principal),
            show(&self.resource)
        )
    }
}

/// Parses a slot value (`PermissionProfile::"tester"`, `CodeSpace::Workspace::"api"`): a Cedar
/// entity uid; a type without a namespace is taken as the schema's (`CodeSpace::`).
pub fn parse_uid(text: &str) -> Result<EntityUid, String> {
    let text = text.trim();
    let qualified = match text.find("::\"") {
        Some(at) if !text.get(..at).unwrap_or("").contains("::") => format!("{NAMESPACE}::{text}"),
        _ => text.to_string(),
    };
    EntityUid::from_str(&qualified).map_err(|e| {
        format!(
            "`{text}` is not a Cedar entity uid like PermissionProfile::\"tester\" ({})",
            e.to_string().lines().next().unwrap_or("")
        )
    })
}

fn workspace_uid(id: &str) -> Result<EntityUid, String> {
    let ty =
        EntityTypeName::from_str(&format!("{NAMESPACE}::Workspace")).map_err(|e| e.to_string())?;
    Ok(EntityUid::from_type_name_and_id(ty, EntityId::new(id)))
}

/// Expands the links to the linked policies they make, in link order. Every problem of the
/// config's own shape (a bad uid, `slots.resource` together with `workspaces`, a link that
/// fills nothing, two links making the same id) is one diagnostic naming the link.
pub fn expand(links: &[TemplateLink]) -> Result<Vec<Expansion>, Vec<String>> {
    let mut out = Vec::new();
    let mut errs = Vec::new();
    let mut seen = BTreeSet::new();
    for (index, link) in links.iter().enumerate() {
        let at = format!("policies.templates[{index}] (template {})", link.template);
        let principal = match link.slots.principal.as_deref().map(parse_uid).transpose() {
            Ok(p) => p,
            Err(e) => {
                errs.push(format!("{at}: slots.principal: {e}"));
                continue;
            }
        };
        let resources: Vec<Option<EntityUid>> = match (
            &link.slots.resource,
            link.workspaces.is_empty(),
        ) {
            (Some(_), false) => {
                errs.push(format!(
                        "{at}: give slots.resource or workspaces, not both (workspaces fill ?resource, one linked policy per workspace)"
                    ));
                continue;
            }
            (Some(r), true) => match parse_uid(r) {
                Ok(u) => vec![Some(u)],
                Err(e) => {
                    errs.push(format!("{at}: slots.resource: {e}"));
                    continue;
                }
            },
            (None, true) => vec![None],
            (None, false) => {
                let mut v = Vec::new();
                for w in &link.workspaces {
                    match workspace_uid(w) {
                        Ok(u) => v.push(Some(u)),
                        Err(e) => errs.push(format!("{at}: workspace {w}: {e}")),
                    }
                }
                v
            }
        };
        if principal.is_none() && resources.iter().all(Option::is_none) {
            errs.push(format!(
                "{at}: the link fills no slot; give slots.principal, slots.resource or workspaces"
            ));
            continue;
        }
        for resource in resources {
            let parts: Vec<String> = [&principal, &resource]
                .into_iter()
                .flatten()
                .map(|u| u.id().unescaped().to_string())
                .collect();
            let id = format!("{}[{}]", link.template, parts.join(","));
            if !seen.insert(id.clone()) {
                errs.push(format!("{at}: the linked policy {id} is made twice"));
                continue;
            }
            out.push(Expansion {
                id,
                template: link.template.clone(),
                principal: principal.clone(),
                resource,
                index,
            });
        }
    }
    if errs.is_empty() { Ok(out) } else { Err(errs) }
}

/// The canonical form of the links that enters the set's hash: one line per linked policy
/// (id, template, slot values) sorted by id, so the config's order and spelling (`Workspace`
/// or `CodeSpace::Workspace`, `workspaces` or one link per workspace) do not matter; links that
/// do not expand enter as their JSON.
pub fn canonical(links: &[TemplateLink]) -> String {
    match expand(links) {
        Ok(exp) => {
            let mut lines: Vec<String> = exp.iter().map(Expansion::canonical).collect();
            lines.sort();
            format!("links\0{}", lines.join("\n"))
        }
        Err(_) => format!("raw\0{}", serde_json::to_string(links).unwrap_or_default()),
    }
}

/// Links every expansion into `set` with `PolicySet::link`: the template must exist (and be a
/// template, not a static policy), each slot it has must be filled and no slot it lacks.
/// Returns the ids linked (with their template) or one diagnostic per bad link.
pub fn link_all(set: &mut PolicySet, expansions: &[Expansion]) -> Vec<String> {
    let mut errs = Vec::new();
    let templates: Vec<String> = set.templates().map(|t| t.id().to_string()).collect();
    for e in expansions {
        let at = format!("policies.templates[{}] (template {})", e.index, e.template);
        let tid = PolicyId::new(&e.template);
        let Some(template) = set.template(&tid) else {
            if set.policy(&tid).is_some() {
                errs.push(format!(
                    "{at}: {} is a static policy, not a template (a template has ?principal or ?resource in its scope)",
                    e.template
                ));
            } else {
                errs.push(format!(
                    "{at}: no template with @id(\"{}\") in the set{}",
                    e.template,
                    if templates.is_empty() {
                        " (it has no templates)".to_string()
                    } else {
                        format!(
                            " (templates: {}){}",
                            templates.join(", "),
                            crate::suggest::hint(&e.template, templates.iter().map(String::as_str))
                        )
                    }
                ));
            }
            continue;
        };
        let has: Vec<SlotId> = template.slots().cloned().collect();
        let wants_principal = has.contains(&SlotId::principal());
        let wants_resource = has.contains(&SlotId::resource());
        let mut bad = false;
        match (wants_principal, e.principal.is_some()) {
            (true, false) => {
                errs.push(format!(
                    "{at}: template {} has a ?principal slot; give slots.principal",
                    e.template
                ));
                bad = true;
            }
            (false, true) => {
                errs.push(format!(
                    "{at}: template {} has no ?principal slot; drop slots.principal",
                    e.template
                ));
                bad = true;
            }
            _ => {}
        }
        match (wants_resource, e.resource.is_some()) {
            (true, false) => {
                errs.push(format!(
                    "{at}: template {} has a ?resource slot; give slots.resource or workspaces",
                    e.template
                ));
                bad = true;
            }
            (false, true) => {
                errs.push(format!(
                    "{at}: template {} has no ?resource slot; drop slots.resource and workspaces",
                    e.template
                ));
                bad = true;
            }
            _ => {}
        }
        if bad {
            continue;
        }
        let mut vals = HashMap::new();
        if let Some(p) = &e.principal {
            vals.insert(SlotId::principal(), p.clone());
        }
        if let Some(r) = &e.resource {
            vals.insert(SlotId::resource(), r.clone());
        }
        if let Err(err) = set.link(tid, PolicyId::new(&e.id), vals) {
            errs.push(format!("{at}: cannot link {}: {err}", e.id));
        }
    }
    errs
}

/// The set as static policies only: each linked policy turned into the static policy it is (its
/// template with the slots filled, under the link's id) and the templates left out (a template
/// alone never applies). For tools that take static policies (the symbolic checks).
pub fn static_view(set: &PolicySet) -> Result<PolicySet, String> {
    let mut out = PolicySet::new();
    for p in set.policies() {
        let p = if p.is_static() {
            p.clone()
        } else {
            let est = p.to_json().map_err(|e| format!("{}: {e}", p.id()))?;
            cedar_policy::Policy::from_json(Some(p.id().clone()), est)
                .map_err(|e| format!("{}: {e}", p.id()))?
        };
        out.add(p).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::TemplateSlots;

    fn link(t: &str, p: Option<&str>, r: Option<&str>, ws: &[&str]) -> TemplateLink {
        TemplateLink {
            template: t.into(),
            slots: TemplateSlots {
                principal: p.map(str::to_string),
                resource: r.map(str::to_string),
            },
            workspaces: ws.iter().map(|s| (*s).to_string()).collect(),
        }
    }

    #[test]
    fn ids_are_readable_and_workspaces_fill_the_resource() {
        let e = expand(&[link(
            "team.tester",
            Some("PermissionProfile::\"tester\""),
            None,
            &["api", "web"],
        )])
        .unwrap();
        let ids: Vec<&str> = e.iter().map(|x| x.id.as_str()).collect();
        assert_eq!(ids, ["team.tester[tester,api]", "team.tester[tester,web]"]);
        assert_eq!(
            e[0].resource.as_ref().unwrap().to_string(),
            "CodeSpace::Workspace::\"api\""
        );
        let only_ws = expand(&[link("t", None, None, &["api"])]).unwrap();
        assert_eq!(only_ws[0].id, "t[api]");
    }

    #[test]
    fn bad_shapes_name_the_link() {
        let errs = expand(&[
            link("a", None, Some("Workspace::\"x\""), &["x"]),
            link("b", Some("not a uid"), None, &[]),
            link("c", None, None, &[]),
            link("d", None, None, &["x", "x"]),
        ])
        .unwrap_err()
        .join("\n");
        assert!(
            errs.contains(
                "policies.templates[0] (template a): give slots.resource or workspaces, not both"
            ),
            "{errs}"
        );
        assert!(
            errs.contains("policies.templates[1] (template b): slots.principal: `not a uid`"),
            "{errs}"
        );
        assert!(
            errs.contains("policies.templates[2] (template c): the link fills no slot"),
            "{errs}"
        );
        assert!(
            errs.contains("the linked policy d[x] is made twice"),
            "{errs}"
        );
    }

    #[test]
    fn the_static_view_fills_the_slots() {
        let mut set = PolicySet::from_str(
            "@id(\"t\")\npermit (principal in ?principal, action, resource in ?resource);",
        )
        .unwrap();
        let t = set.templates().next().unwrap().id().clone();
        let exp = expand(&[link("t", Some("PermissionProfile::\"p\""), None, &["api"])]).unwrap();
        let mut named = PolicySet::new();
        named
            .add_template(set.template(&t).unwrap().new_id(PolicyId::new("t")))
            .unwrap();
        set = named;
        assert!(link_all(&mut set, &exp).is_empty());
        let view = static_view(&set).unwrap();
        assert_eq!(view.templates().count(), 0);
        let p = view.policy(&PolicyId::new("t[p,api]")).unwrap();
        assert!(p.is_static());
        let est = p.to_json().unwrap();
        assert_eq!(est["principal"]["entity"]["__entity"]["id"], "p", "{est}");
        assert_eq!(est["resource"]["entity"]["__entity"]["id"], "api", "{est}");
    }

    #[test]
    fn the_canonical_form_ignores_order_and_spelling() {
        let a = [
            link("t", None, None, &["api", "web"]),
            link("u", Some("PermissionProfile::\"x\""), None, &[]),
        ];
        let b = [
            link("u", Some("CodeSpace::PermissionProfile::\"x\""), None, &[]),
            link("t", None, None, &["web"]),
            link("t", None, Some("Workspace::\"api\""), &[]),
        ];
        assert_eq!(canonical(&a), canonical(&b));
        assert_ne!(canonical(&a), canonical(&a[..1]));
    }
}
