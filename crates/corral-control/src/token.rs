//! Random single-use tokens (invitations), handed out once and stored only as SHA-256 hashes.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest as _, Sha256};

use crate::error::{ControlError, Result};

/// A fresh token (256 random bits, URL-safe base64 without padding) and its SHA-256.
pub(crate) fn new_token() -> Result<(String, Vec<u8>)> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|_| ControlError::internal("the system random source failed"))?;
    let token = URL_SAFE_NO_PAD.encode(bytes);
    let hash = Sha256::digest(token.as_bytes()).to_vec();
    Ok((token, hash))
}

/// The SHA-256 of a presented token, or `None` when it cannot be one of ours (so a malformed
/// token never reaches the database).
pub(crate) fn hash_token(token: &str) -> Option<Vec<u8>> {
    let decoded = URL_SAFE_NO_PAD.decode(token).ok()?;
    (decoded.len() == 32).then(|| Sha256::digest(token.as_bytes()).to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_hash_to_what_is_stored() {
        let (a, ha) = new_token().unwrap();
        let (b, _) = new_token().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
        assert_eq!(hash_token(&a), Some(ha));
        assert_eq!(hash_token("not a token"), None);
        assert_eq!(hash_token(&a[..42]), None);
    }
}
