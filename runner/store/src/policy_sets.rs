//! The `policy_sets` table: the record of each policy set the server put in force (the set every
//! audit row names by `policy_set_sha256`): when it first went live and who signed it.

use rusqlite::{OptionalExtension, params};

use crate::error::StoreError;
use crate::store::Store;

/// One policy set's record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicySetRecord {
    /// The set's `sha256:` hash (as in `decisions.policy_set_sha256`).
    pub sha256: String,
    /// When the server first put it in force (unix ms).
    pub first_live_ms: i64,
    /// The `allowed_signers` principal whose key signed it; `None` for an unsigned set.
    pub signer_principal: Option<String>,
    /// The signing key, as `ssh-keygen` names it (`ED25519 key SHA256:…`).
    pub signer_key: Option<String>,
}

impl Store {
    /// Records that the set `sha256` is in force, signed by `signer` (principal, key) or not. The
    /// first time keeps `at_ms`; a signer, once recorded, is kept when the same set is loaded
    /// again, and a later verified signer replaces it.
    pub fn record_policy_set(
        &self,
        sha256: &str,
        at_ms: i64,
        signer: Option<(&str, &str)>,
    ) -> Result<(), StoreError> {
        let conn = self.conn();
        conn.prepare_cached(
            "INSERT INTO policy_sets (sha256, first_live_ms, signer_principal, signer_key) \
             VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (sha256) DO UPDATE SET \
               signer_principal = COALESCE(excluded.signer_principal, signer_principal), \
               signer_key = COALESCE(excluded.signer_key, signer_key)",
        )?
        .execute(params![
            sha256,
            at_ms,
            signer.map(|s| s.0),
            signer.map(|s| s.1)
        ])?;
        Ok(())
    }

    /// The record of the set `sha256`, if the server ever put it in force with this store.
    pub fn policy_set(&self, sha256: &str) -> Result<Option<PolicySetRecord>, StoreError> {
        let conn = self.conn();
        Ok(conn
            .prepare_cached(
                "SELECT sha256, first_live_ms, signer_principal, signer_key FROM policy_sets \
                 WHERE sha256 = ?1",
            )?
            .query_row(params![sha256], |r| {
                Ok(PolicySetRecord {
                    sha256: r.get(0)?,
                    first_live_ms: r.get(1)?,
                    signer_principal: r.get(2)?,
                    signer_key: r.get(3)?,
                })
            })
            .optional()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_is_recorded_once_and_keeps_its_signer() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("s.db")).unwrap();
        assert_eq!(s.policy_set("sha256:a").unwrap(), None);
        s.record_policy_set(
            "sha256:a",
            5,
            Some(("alice@example.com", "ED25519 key SHA256:x")),
        )
        .unwrap();
        s.record_policy_set("sha256:a", 9, None).unwrap();
        let r = s.policy_set("sha256:a").unwrap().unwrap();
        assert_eq!(r.first_live_ms, 5);
        assert_eq!(r.signer_principal.as_deref(), Some("alice@example.com"));
        assert_eq!(r.signer_key.as_deref(), Some("ED25519 key SHA256:x"));
        s.record_policy_set("sha256:b", 7, None).unwrap();
        let r = s.policy_set("sha256:b").unwrap().unwrap();
        assert_eq!(r.signer_principal, None);
    }
}
