//! Permission profiles: the built-ins, the operator's (`profiles`) and the checks of their
//! `extends` tree.

use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeMap;

use super::error::ConfigError;
use codespace_policy::config::{BUILTIN_PROFILES, Profile, builtin_profiles};

/// An operator-written permission profile.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Profile")]
pub(super) struct RawProfile {
    /// The parent profile (its Cedar entity parent): policies on the parent apply to this one.
    #[serde(default)]
    pub(super) extends: Option<String>,
    /// Free text shown to operators.
    #[serde(default)]
    pub(super) description: Option<String>,
}

/// The built-in profiles and the operator's: no built-in redefined, ids Cedar can quote, every
/// `extends` a known profile, no cycle.
pub(super) fn resolve(
    raw: &BTreeMap<String, RawProfile>,
) -> Result<BTreeMap<String, Profile>, ConfigError> {
    let mut profiles = builtin_profiles();
    for (id, p) in raw {
        if profiles.contains_key(id) && BUILTIN_PROFILES.iter().any(|(b, _)| b == id) {
            return Err(ConfigError(format!(
                "profiles.{id}: redefines a built-in profile"
            )));
        }
        if id.is_empty() || id.contains('"') || id.contains('\\') {
            return Err(ConfigError(format!("profiles.{id}: invalid profile id")));
        }
        profiles.insert(
            id.clone(),
            Profile {
                id: id.clone(),
                extends: p.extends.clone(),
                description: p.description.clone(),
            },
        );
    }
    for (id, p) in &profiles {
        if let Some(parent) = &p.extends
            && !profiles.contains_key(parent)
        {
            return Err(ConfigError(format!(
                "profiles.{id}.extends: unknown profile `{parent}`{}",
                crate::suggest::did_you_mean(parent, profiles.keys().map(String::as_str))
            )));
        }
        // Cycle check: follow parents at most profiles.len() steps.
        let mut cur = p.extends.clone();
        let mut steps = 0;
        while let Some(c) = cur {
            steps += 1;
            if c == *id || steps > profiles.len() {
                return Err(ConfigError(format!(
                    "profiles.{id}.extends: profiles extend each other in a cycle"
                )));
            }
            cur = profiles.get(&c).and_then(|x| x.extends.clone());
        }
    }
    Ok(profiles)
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use std::path::Path;

    fn load(json: &str) -> Result<Config, ConfigError> {
        Config::from_json(json, Path::new("/"))
    }

    #[test]
    fn operator_profile_extends_builtin() {
        let dir = tempfile::tempdir().unwrap();
        let json = format!(
            r#"{{"workspaces": {{"w": {{"root": "{}", "profile": "ci"}}}}, "profiles": {{"ci": {{"extends": "read-only", "description": "x"}}}}}}"#,
            dir.path().display()
        );
        let cfg = load(&json).unwrap();
        assert_eq!(cfg.profiles["ci"].extends.as_deref(), Some("read-only"));
    }
}
