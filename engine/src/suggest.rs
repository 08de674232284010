//! "Did you mean …" for names an operator or a test file got wrong: the closest known name by
//! edit distance, when it is close enough to be a plausible typo.

/// Levenshtein distance between two strings, by characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur: Vec<usize> = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        if let Some(first) = cur.first_mut() {
            *first = i + 1;
        }
        for (j, cb) in b.iter().enumerate() {
            let sub = prev.get(j).copied().unwrap_or(usize::MAX / 2) + usize::from(ca != *cb);
            let del = prev.get(j + 1).copied().unwrap_or(usize::MAX / 2) + 1;
            let ins = cur.get(j).copied().unwrap_or(usize::MAX / 2) + 1;
            if let Some(slot) = cur.get_mut(j + 1) {
                *slot = sub.min(del).min(ins);
            }
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev.last().copied().unwrap_or(0)
}

/// The known name closest to `word`, when at most a third of its length (and at least one edit)
/// away; `None` when nothing is that close.
pub fn closest<'a, I>(word: &str, known: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let limit = (word.chars().count() / 3).max(1);
    known
        .into_iter()
        .map(|k| (edit_distance(word, k), k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// ` (did you mean `x`?)` or "".
pub fn did_you_mean<'a, I>(word: &str, known: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    match closest(word, known) {
        Some(k) => format!(" (did you mean `{k}`?)"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("read", "read"), 0);
        assert_eq!(edit_distance("reed", "read"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("src-writter", "src-writer"), 1);
    }

    #[test]
    fn suggests_only_close_names() {
        let known = ["read", "find", "apply_patch"];
        assert_eq!(closest("reed", known), Some("read"));
        assert_eq!(closest("zzzzzz", known), None);
        assert_eq!(
            did_you_mean("apply_pach", known),
            " (did you mean `apply_patch`?)"
        );
    }
}
