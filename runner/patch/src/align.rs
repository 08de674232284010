//! Pairs a chunk's unchanged lines (present in both old and new) so the file's own bytes for
//! those lines, terminator included, can be kept.

/// Above this many cells the middle part is not aligned (its lines count as replaced).
const MAX_CELLS: usize = 4_000_000;

/// For each new line, the index of the old line it is an unchanged copy of, if any.
///
/// The pairing is a longest common subsequence on exact equality: common prefix and suffix
/// first, then a table for the rest when it is small enough.
pub(crate) fn align<S: AsRef<str>>(old: &[S], new: &[S]) -> Vec<Option<usize>> {
    let eq = |o: usize, n: usize| match (old.get(o), new.get(n)) {
        (Some(a), Some(b)) => a.as_ref() == b.as_ref(),
        _ => false,
    };
    let mut map = vec![None; new.len()];
    let mut prefix = 0;
    while prefix < old.len() && prefix < new.len() && eq(prefix, prefix) {
        set(&mut map, prefix, prefix);
        prefix += 1;
    }
    let mut suffix = 0;
    while prefix + suffix < old.len()
        && prefix + suffix < new.len()
        && eq(old.len() - 1 - suffix, new.len() - 1 - suffix)
    {
        set(&mut map, new.len() - 1 - suffix, old.len() - 1 - suffix);
        suffix += 1;
    }
    let rows = old.len() - prefix - suffix;
    let cols = new.len() - prefix - suffix;
    if rows == 0 || cols == 0 || (rows + 1).saturating_mul(cols + 1) > MAX_CELLS {
        return map;
    }
    // table[i][j] = LCS length of old[prefix+i..] and new[prefix+j..] (middle part only).
    let width = cols + 1;
    let mut table = vec![0u32; (rows + 1) * width];
    let cell = |t: &[u32], i: usize, j: usize| t.get(i * width + j).copied().unwrap_or(0);
    for i in (0..rows).rev() {
        for j in (0..cols).rev() {
            let value = if eq(prefix + i, prefix + j) {
                cell(&table, i + 1, j + 1).saturating_add(1)
            } else {
                cell(&table, i + 1, j).max(cell(&table, i, j + 1))
            };
            if let Some(slot) = table.get_mut(i * width + j) {
                *slot = value;
            }
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < rows && j < cols {
        if eq(prefix + i, prefix + j) {
            set(&mut map, prefix + j, prefix + i);
            i += 1;
            j += 1;
        } else if cell(&table, i + 1, j) >= cell(&table, i, j + 1) {
            i += 1;
        } else {
            j += 1;
        }
    }
    map
}

fn set(map: &mut [Option<usize>], new_index: usize, old_index: usize) {
    if let Some(slot) = map.get_mut(new_index) {
        *slot = Some(old_index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacement_between_context_lines() {
        let old = ["one", "two", "three"];
        let new = ["ONE", "two", "between", "three"];
        assert_eq!(align(&old, &new), vec![None, Some(1), None, Some(2)]);
    }

    #[test]
    fn identical_sequences_align_fully() {
        let v = ["a", "b", "a"];
        assert_eq!(align(&v, &v), vec![Some(0), Some(1), Some(2)]);
    }

    #[test]
    fn middle_uses_the_table() {
        let old = ["p", "x", "k1", "y", "k2", "z", "s"];
        let new = ["p", "k1", "n", "k2", "s"];
        assert_eq!(
            align(&old, &new),
            vec![Some(0), Some(2), None, Some(4), Some(6)]
        );
    }

    #[test]
    fn nothing_in_common() {
        assert_eq!(align(&["a"], &["b", "c"]), vec![None, None]);
        let empty: [&str; 0] = [];
        assert_eq!(align(&empty, &["b"]), vec![None]);
        assert!(align(&["a"], &empty).is_empty());
    }
}
