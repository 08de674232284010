//! `Version`: the `sha256:<hex>` content version of a file.

use sha2::{Digest, Sha256};

const PREFIX: &str = "sha256:";

/// The version of a file: `"sha256:"` followed by the lowercase hex SHA-256 of its whole content.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(String);

/// A string that is not a well-formed version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid version (expected `sha256:` followed by 64 lowercase hex digits)")]
pub struct VersionParseError;

impl Version {
    /// The version of `data`.
    pub fn from_bytes(data: &[u8]) -> Version {
        let mut h = VersionHasher::new();
        h.update(data);
        h.finish()
    }

    /// Parses `"sha256:<64 lowercase hex>"`.
    pub fn parse(s: &str) -> Result<Version, VersionParseError> {
        let hex_part = s.strip_prefix(PREFIX).ok_or(VersionParseError)?;
        let well_formed = hex_part.len() == 64
            && hex_part
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if well_formed {
            Ok(Version(s.to_owned()))
        } else {
            Err(VersionParseError)
        }
    }

    /// The version string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Incremental computation of a [`Version`] over streamed content.
#[derive(Default)]
pub(crate) struct VersionHasher(Sha256);

impl VersionHasher {
    /// A hasher over no bytes yet.
    pub(crate) fn new() -> VersionHasher {
        VersionHasher(Sha256::new())
    }

    /// Feeds more content.
    pub(crate) fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// The version of everything fed.
    pub(crate) fn finish(self) -> Version {
        Version(format!("{PREFIX}{}", hex::encode(self.0.finalize())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest() {
        assert_eq!(
            Version::from_bytes(b"").as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            Version::from_bytes(b"abc").to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn parse_round_trip_and_rejects() {
        let v = Version::from_bytes(b"x");
        assert_eq!(Version::parse(v.as_str()), Ok(v.clone()));
        assert!(Version::parse("absent").is_err());
        assert!(Version::parse("sha256:abc").is_err());
        assert!(Version::parse(&v.as_str().to_uppercase()).is_err());
        assert!(Version::parse(&format!("sha1:{}", &v.as_str()[7..])).is_err());
    }
}
