//! The server's own temporary file names, `.codespace-tmp-<instance>-<n>`, and the set of instance ids
//! whose names are the server's (hidden from listings, swept after a crash).
//!
//! `<instance>` is 16 lowercase hex digits naming one server start (the server records it in its store),
//! `<n>` a decimal counter. A name is the server's only when its instance id is known: this process's own,
//! one given to [`TempNames::remember`], or one the optional lookup confirms. A user's file with a similar
//! name (`.codespace-tmp-foo`, or an instance id nobody recorded) is an ordinary file.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

/// Prefix of every temporary file the server creates (see [`TempNames`] for the whole name).
pub const TEMP_PREFIX: &str = ".codespace-tmp-";

/// Length of an instance id: 16 lowercase hex digits (64 bits).
pub const INSTANCE_ID_LEN: usize = 16;

/// Asks whether an instance id not yet known belongs to the server (e.g. a store query).
pub type InstanceLookup = Box<dyn Fn(&str) -> bool + Send + Sync>;

/// An instance id that is not 16 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a server instance id is {INSTANCE_ID_LEN} lowercase hex digits")]
pub struct InstanceIdError;

/// Whether `id` has the instance id form (16 lowercase hex digits).
pub fn is_instance_id(id: &str) -> bool {
    id.len() == INSTANCE_ID_LEN && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Splits a file name of the form `.codespace-tmp-<instance>-<n>` into its instance id and counter;
/// `None` for any other name. Says nothing about whether the instance is known.
pub fn parse_temp_name(name: &str) -> Option<(&str, u64)> {
    let rest = name.strip_prefix(TEMP_PREFIX)?;
    let (id, n) = rest.split_once('-')?;
    if !is_instance_id(id) || n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((id, n.parse().ok()?))
}

/// Temp-file bookkeeping of one process.
#[derive(Debug, Default)]
struct Live {
    /// Temporary files created and not yet renamed or removed.
    open: usize,
    /// No new temporary file may be created (see [`TempNames::seal`]).
    sealed: bool,
}

/// The temporary names of one server instance, and the instance ids known to be the server's.
pub struct TempNames {
    own: String,
    next: AtomicU64,
    live: Mutex<Live>,
    known: RwLock<HashSet<String>>,
    lookup: Option<InstanceLookup>,
}

impl std::fmt::Debug for TempNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TempNames")
            .field("own", &self.own)
            .finish_non_exhaustive()
    }
}

impl TempNames {
    /// The names of instance `own` (16 lowercase hex digits), which is known from the start.
    pub fn new(own: &str) -> Result<TempNames, InstanceIdError> {
        if !is_instance_id(own) {
            return Err(InstanceIdError);
        }
        Ok(TempNames::build(own.to_owned()))
    }

    fn build(own: String) -> TempNames {
        TempNames {
            own,
            next: AtomicU64::new(1),
            live: Mutex::new(Live::default()),
            known: RwLock::new(HashSet::new()),
            lookup: None,
        }
    }

    /// Adds a lookup asked about well-formed instance ids that are not (yet) known; a `true` answer is
    /// remembered, a `false` one is asked again next time (an instance may be recorded later).
    pub fn with_lookup(mut self, lookup: InstanceLookup) -> TempNames {
        self.lookup = Some(lookup);
        self
    }

    /// The process-wide names used by a [`crate::Root`] opened without any: a random instance id that no
    /// store records (so nothing sweeps its files; listings still hide them).
    pub fn unregistered() -> Arc<TempNames> {
        static DEFAULT: OnceLock<Arc<TempNames>> = OnceLock::new();
        Arc::clone(
            DEFAULT.get_or_init(|| Arc::new(TempNames::build(format!("{:016x}", random_u64())))),
        )
    }

    /// This instance's id.
    pub fn instance(&self) -> &str {
        &self.own
    }

    /// Marks `id` as a server instance (its names are hidden). Ill-formed ids are ignored.
    pub fn remember(&self, id: &str) {
        if is_instance_id(id) && id != self.own {
            self.known
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id.to_owned());
        }
    }

    /// Whether the file name `name` (a leaf, not a path) is a temporary file of a known server instance.
    pub fn is_server_temp(&self, name: &str) -> bool {
        let Some((id, _)) = parse_temp_name(name) else {
            return false;
        };
        if id == self.own
            || self
                .known
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(id)
        {
            return true;
        }
        match &self.lookup {
            Some(lookup) if lookup(id) => {
                self.remember(id);
                true
            }
            _ => false,
        }
    }

    /// A fresh name of this instance: `.codespace-tmp-<instance>-<n>`.
    pub fn next_name(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{TEMP_PREFIX}{}-{n}", self.own)
    }

    /// Counts a temporary file about to be created; `false` once sealed (create nothing then).
    pub(crate) fn begin(&self) -> bool {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        if live.sealed {
            return false;
        }
        live.open += 1;
        true
    }

    /// Uncounts a temporary file that was renamed away or removed (or never created).
    pub(crate) fn end(&self) {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.open = live.open.saturating_sub(1);
    }

    /// Temporary files of this instance that exist now (created, not yet renamed or removed).
    pub fn open_count(&self) -> usize {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open
    }

    /// Refuses every later temporary file (writes then fail) and says whether none exists now: when
    /// `true`, this instance leaves no temporary file behind, whatever happens to the process after.
    pub fn seal(&self) -> bool {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.sealed = true;
        live.open == 0
    }
}

/// 64 random bits from the kernel, or (if that fails) from the clock and the pid.
fn random_u64() -> u64 {
    let mut buf = [0_u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf))
        .is_ok()
    {
        return u64::from_le_bytes(buf);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    (nanos as u64) ^ (u64::from(std::process::id()) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef";
    const B: &str = "fedcba9876543210";

    #[test]
    fn names_parse_only_in_the_exact_scheme() {
        let names = TempNames::new(A).unwrap();
        let n = names.next_name();
        assert_eq!(n, format!(".codespace-tmp-{A}-1"));
        assert_eq!(parse_temp_name(&n), Some((A, 1)));
        for other in [
            ".codespace-tmp-foo",
            ".codespace-tmp-0123456789abcde-1",   // 15 digits
            ".codespace-tmp-0123456789ABCDEF-1",  // upper case
            ".codespace-tmp-0123456789abcdef-",   // no counter
            ".codespace-tmp-0123456789abcdef-1x", // junk counter
            ".codespace-tmp-0123456789abcdef",    // the old scheme
            "codespace-tmp-0123456789abcdef-1",
            "x.codespace-tmp-0123456789abcdef-1",
        ] {
            assert_eq!(parse_temp_name(other), None, "{other}");
        }
    }

    #[test]
    fn only_known_instances_are_server_temps() {
        let names = TempNames::new(A).unwrap();
        assert!(names.is_server_temp(&names.next_name()));
        assert!(!names.is_server_temp(&format!(".codespace-tmp-{B}-1")));
        assert!(!names.is_server_temp(".codespace-tmp-foo"));
        names.remember(B);
        assert!(names.is_server_temp(&format!(".codespace-tmp-{B}-1")));
        assert!(TempNames::new("nothex").is_err());
    }

    #[test]
    fn the_lookup_is_asked_for_unknown_ids_and_positive_answers_stick() {
        let asked = Arc::new(AtomicU64::new(0));
        let a2 = Arc::clone(&asked);
        let names = TempNames::new(A).unwrap().with_lookup(Box::new(move |id| {
            a2.fetch_add(1, Ordering::Relaxed);
            id == B
        }));
        let other = format!(".codespace-tmp-{}-3", "1111111111111111");
        assert!(!names.is_server_temp(&other));
        assert!(!names.is_server_temp(&other));
        assert_eq!(
            asked.load(Ordering::Relaxed),
            2,
            "negative answers are asked again"
        );
        let b = format!(".codespace-tmp-{B}-9");
        assert!(names.is_server_temp(&b));
        assert!(names.is_server_temp(&b));
        assert_eq!(
            asked.load(Ordering::Relaxed),
            3,
            "a positive answer is remembered"
        );
        assert!(!names.is_server_temp(".codespace-tmp-foo"));
        assert_eq!(
            asked.load(Ordering::Relaxed),
            3,
            "ill-formed names are never looked up"
        );
    }

    #[test]
    fn seal_reports_open_files_and_refuses_new_ones() {
        let names = TempNames::new(A).unwrap();
        assert!(names.begin());
        assert_eq!(names.open_count(), 1);
        assert!(!names.seal(), "a temp file exists");
        assert!(!names.begin(), "sealed");
        names.end();
        assert!(names.seal());
    }

    #[test]
    fn unregistered_names_are_well_formed_and_shared() {
        let a = TempNames::unregistered();
        let b = TempNames::unregistered();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(is_instance_id(a.instance()));
    }
}
