//! The caller as a person (`context.session.user`): the facts an OIDC token's mapped claims give
//! (id, email, groups, further claims), how they travel in a request's recorded context, and the
//! `User` / `Group` entities the decision adds for them.
//!
//! The recorded context keeps the facts themselves (`session.user = {id, email, groups, tags}`),
//! so a replayed, explained or tested request rebuilds exactly the entities the server used;
//! just before Cedar sees the context, [`split_context`] swaps them for the entity reference
//! `CodeSpace::User::"<id>"` and returns the entities.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The caller's user, from the claims `identity.oidc.claims` maps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserFacts {
    /// The entity id: `User::"<id>"` (the `sub` claim by default).
    pub id: String,
    /// `email` (absent when the token has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// `groups`: every name is also a parent `Group::"<name>"`.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Further mapped claims, as entity tags (`getTag("<name>")`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

impl UserFacts {
    /// The recorded form inside `context.session`.
    pub fn to_context(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|_| json!({ "id": self.id }))
    }
}

/// A context with `session.user` turned into the entity reference Cedar expects, and the facts
/// the `User` / `Group` entities are built from (None when the context names no user).
pub fn split_context(ctx: &Value) -> Result<(Value, Option<UserFacts>), String> {
    let Some(facts) = user_facts(ctx)? else {
        return Ok((ctx.clone(), None));
    };
    let mut out = ctx.clone();
    if let Some(Value::Object(s)) = out.pointer_mut("/session") {
        s.insert(
            "user".into(),
            json!({"__entity": {"type": "CodeSpace::User", "id": facts.id}}),
        );
    }
    Ok((out, Some(facts)))
}

/// The user facts `ctx` records (None when it names no user, or names one by entity reference:
/// a context written by hand for Cedar, with no facts to add, where a policy reading the
/// user's attributes fails, which denies). Reads the context without copying it.
pub fn user_facts(ctx: &Value) -> Result<Option<UserFacts>, String> {
    let Some(recorded) = ctx.get("session").and_then(|s| s.get("user")) else {
        return Ok(None);
    };
    if recorded.get("__entity").is_some() {
        return Ok(None);
    }
    UserFacts::deserialize(recorded)
        .map(Some)
        .map_err(|e| format!("context.session.user: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_user_becomes_a_reference_and_its_facts() {
        let u = UserFacts {
            id: "alice".into(),
            email: Some("a@example.com".into()),
            groups: vec!["sec-reviewers".into()],
            tags: BTreeMap::from([("dept".into(), "eng".into())]),
        };
        let ctx = json!({"session": {"client": "c", "transport": "t", "user": u.to_context()}});
        let (cedar, facts) = split_context(&ctx).unwrap();
        assert_eq!(facts.unwrap(), u);
        assert_eq!(
            cedar.pointer("/session/user/__entity/id"),
            Some(&json!("alice"))
        );
        let (same, none) = split_context(&json!({"session": {"client": "c"}})).unwrap();
        assert!(none.is_none());
        assert_eq!(same, json!({"session": {"client": "c"}}));
        assert!(split_context(&json!({"session": {"user": {"nope": 1}}})).is_err());
    }
}
