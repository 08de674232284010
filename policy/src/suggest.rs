//! "Did you mean …" for names an operator mistyped (profiles, environments): the valid names,
//! the closest first when one is near enough by edit distance.

/// The words after "unknown <kind> `given`": ` (did you mean `x`?; valid: a, b)`, or
/// ` (valid: a, b)` when nothing is close, or ` (none are defined)`.
pub fn did_you_mean<'a>(given: &str, valid: impl IntoIterator<Item = &'a str>) -> String {
    let mut names: Vec<&str> = valid.into_iter().collect();
    names.sort_unstable();
    names.dedup();
    if names.is_empty() {
        return " (none are defined)".to_string();
    }
    let list = names.join(", ");
    match closest(given, &names) {
        Some(best) => format!(" (did you mean `{best}`? valid: {list})"),
        None => format!(" (valid: {list})"),
    }
}

/// The valid name nearest to `given`, when the distance is small for its length: at most a
/// third of the longer name, and at least 1 allowed; a case-insensitive match or a prefix of
/// three or more characters also counts.
pub fn closest<'a>(given: &str, valid: &[&'a str]) -> Option<&'a str> {
    let lower = given.to_lowercase();
    if let Some(exact) = valid.iter().find(|v| v.to_lowercase() == lower) {
        return Some(exact);
    }
    let mut best: Option<(usize, &'a str)> = None;
    for v in valid {
        let d = strsim::levenshtein(&lower, &v.to_lowercase());
        let limit = (given.chars().count().max(v.chars().count()) / 3).max(1);
        let prefix = lower.chars().count() >= 3 && v.to_lowercase().starts_with(&lower);
        if (d <= limit || prefix) && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, v));
        }
    }
    best.map(|(_, v)| v)
}

/// The short form for places that name one wrong word among many known ones (tools, policy
/// profiles): ` (did you mean `x`?)` when a known name is close, else nothing.
pub fn hint<'a>(given: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    let names: Vec<&str> = known.into_iter().collect();
    closest(given, &names).map_or_else(String::new, |best| format!(" (did you mean `{best}`?)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_nearest_valid_name_and_lists_all() {
        let valid = ["read-only", "workspace-write", "ci"];
        assert_eq!(
            did_you_mean("workspace-wrte", valid),
            " (did you mean `workspace-write`? valid: ci, read-only, workspace-write)"
        );
        assert_eq!(
            did_you_mean("readonly", valid),
            " (did you mean `read-only`? valid: ci, read-only, workspace-write)"
        );
        assert!(did_you_mean("Read-Only", valid).contains("`read-only`"));
        assert!(did_you_mean("work", valid).contains("`workspace-write`"));
    }

    #[test]
    fn lists_without_a_guess_when_nothing_is_close() {
        assert_eq!(
            did_you_mean("superuser", ["read-only", "workspace-write"]),
            " (valid: read-only, workspace-write)"
        );
        assert_eq!(did_you_mean("x", []), " (none are defined)");
    }
}
