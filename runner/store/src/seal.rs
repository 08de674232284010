//! Journal seals: HMAC-SHA256 (RFC 2104) over a patch journal under a key that lives in a file
//! next to the store, not in it, so a party that can write the database but not read the key
//! cannot forge a journal that start-up recovery would apply.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::StoreError;

/// Bytes of a journal key.
const KEY_LEN: usize = 32;
/// SHA-256 block size.
const BLOCK: usize = 64;

/// The secret that seals journals.
#[derive(Clone)]
pub struct JournalKey([u8; KEY_LEN]);

impl std::fmt::Debug for JournalKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JournalKey(..)")
    }
}

/// The key file of a store file: `<store>.key` in the same directory.
pub fn key_path(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push(".key");
    PathBuf::from(name)
}

fn key_err(path: &Path, what: impl std::fmt::Display) -> StoreError {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    StoreError::JournalKey(format!("{name}: {what}"))
}

fn random_bytes() -> Result<[u8; KEY_LEN], std::io::Error> {
    let mut key = [0_u8; KEY_LEN];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
    Ok(key)
}

impl JournalKey {
    /// A fresh random key that lives only in memory (in-memory stores).
    pub fn ephemeral() -> Result<JournalKey, StoreError> {
        Ok(JournalKey(random_bytes()?))
    }

    /// Reads the key at `path`, creating it (owner-only, never replacing an existing file) when
    /// it does not exist. A key file that is not a regular file, is readable or writable by
    /// group or others, or does not hold exactly 32 bytes is refused.
    pub fn load_or_create(path: &Path) -> Result<JournalKey, StoreError> {
        match Self::load(path) {
            Err(StoreError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => return other,
        }
        // Write a temp file, then link it into place: the key appears whole or not at all, and
        // a concurrent creator's key wins without being overwritten.
        let tmp = {
            let mut name = path.as_os_str().to_owned();
            name.push(format!(".tmp-{}", std::process::id()));
            PathBuf::from(name)
        };
        let key = random_bytes()?;
        {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(&key)?;
            f.sync_all()?;
        }
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(JournalKey(key)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Self::load(path),
            Err(e) => Err(e.into()),
        }
    }

    fn load(path: &Path) -> Result<JournalKey, StoreError> {
        let mut f = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        let meta = f.metadata()?;
        if !meta.is_file() {
            return Err(key_err(path, "is not a regular file"));
        }
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(key_err(
                path,
                "must be readable and writable by its owner only (chmod 600)",
            ));
        }
        let mut buf = Vec::with_capacity(KEY_LEN + 1);
        Read::by_ref(&mut f)
            .take(u64::try_from(KEY_LEN + 1).unwrap_or(u64::MAX))
            .read_to_end(&mut buf)?;
        let key: [u8; KEY_LEN] = buf
            .as_slice()
            .try_into()
            .map_err(|_| key_err(path, format!("must hold exactly {KEY_LEN} bytes")))?;
        Ok(JournalKey(key))
    }

    /// HMAC-SHA256 of the message `feed` writes.
    pub(crate) fn mac(&self, feed: impl FnOnce(&mut Fields)) -> [u8; 32] {
        let mut block = [0_u8; BLOCK];
        for (b, k) in block.iter_mut().zip(self.0.iter()) {
            *b = *k;
        }
        hmac(&block, feed)
    }
}

/// The message of a MAC as length-prefixed fields, so no two field lists encode alike.
pub(crate) struct Fields(Sha256);

impl Fields {
    pub(crate) fn field(&mut self, bytes: &[u8]) {
        self.0
            .update(u64::try_from(bytes.len()).unwrap_or(u64::MAX).to_be_bytes());
        self.0.update(bytes);
    }
}

/// HMAC-SHA256 with a key already padded to one block (RFC 2104).
fn hmac(key_block: &[u8; BLOCK], feed: impl FnOnce(&mut Fields)) -> [u8; 32] {
    let mut ipad = [0x36_u8; BLOCK];
    let mut opad = [0x5c_u8; BLOCK];
    for ((i, o), k) in ipad.iter_mut().zip(opad.iter_mut()).zip(key_block) {
        *i ^= k;
        *o ^= k;
    }
    let mut inner = Fields(Sha256::new());
    inner.0.update(ipad);
    feed(&mut inner);
    let inner = inner.0.finalize();
    let mut outer = Sha256::new();
    outer.update(opad);
    outer.update(inner);
    outer.finalize().into()
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::JournalEntry;

    /// RFC 4231 test case 2 (key "Jefe"), fed as one raw message.
    #[test]
    fn hmac_matches_rfc4231_case_2() {
        let mut block = [0_u8; BLOCK];
        for (b, k) in block.iter_mut().zip(b"Jefe") {
            *b = *k;
        }
        let mac = hmac(&block, |m| m.0.update(b"what do ya want for nothing?"));
        assert_eq!(
            hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn seal_binds_every_field() {
        let key = JournalKey([7; KEY_LEN]);
        let e = |p: &str, before: Option<&[u8]>| JournalEntry {
            path: p.into(),
            before: before.map(<[u8]>::to_vec),
            mode: before.map(|_| 0o644),
            created_dirs: Vec::new(),
        };
        let entries = vec![e("a.txt", Some(b"x")), e("b.txt", None)];
        let seal = key.seal("op1", "w", "reg-1", &entries).unwrap();
        assert!(key.verify(&seal, "op1", "w", "reg-1", &entries).unwrap());
        assert!(!key.verify(&seal, "op2", "w", "reg-1", &entries).unwrap());
        assert!(!key.verify(&seal, "op1", "v", "reg-1", &entries).unwrap());
        assert!(!key.verify(&seal, "op1", "w", "reg-2", &entries).unwrap());
        let mut changed = entries.clone();
        changed[0].before = Some(b"y".to_vec());
        assert!(!key.verify(&seal, "op1", "w", "reg-1", &changed).unwrap());
        let mut moved = entries.clone();
        moved[1].path = ".git/hooks/pre-commit".into();
        assert!(!key.verify(&seal, "op1", "w", "reg-1", &moved).unwrap());
        let other = JournalKey([8; KEY_LEN]);
        assert!(!other.verify(&seal, "op1", "w", "reg-1", &entries).unwrap());
    }

    #[test]
    fn key_file_is_created_owner_only_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db.key");
        let a = JournalKey::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = JournalKey::load_or_create(&path).unwrap();
        assert_eq!(a.0, b.0);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = JournalKey::load_or_create(&path).unwrap_err().to_string();
        assert!(err.contains("owner only"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, b"short").unwrap();
        let err = JournalKey::load_or_create(&path).unwrap_err().to_string();
        assert!(err.contains("exactly 32 bytes"), "{err}");
        let link = dir.path().join("link.key");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(
            JournalKey::load_or_create(&link).is_err(),
            "a symlink is refused"
        );
    }
}
