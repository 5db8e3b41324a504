//! Key material: the master key, API-key format and hashing, credential encryption, and the
//! E2B door's per-sandbox access tokens.

use std::fmt;
use std::io::Write as _;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::XChaCha20Poly1305;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use corral_domain::SandboxId;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::error::{RegistryError, Result};
use crate::model::ProjectId;

/// Length of the master key in bytes.
pub const MASTER_KEY_LEN: usize = 32;

/// The server's master key: 32 random bytes kept outside the database (a file with mode
/// 0600 in the data directory). Subkeys derived from it hash API keys and encrypt stored
/// provider credentials. `Debug` never shows it.
#[derive(Clone)]
pub struct MasterKey {
    bytes: Zeroizing<[u8; MASTER_KEY_LEN]>,
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterKey(<redacted>)")
    }
}

fn key_error(message: String) -> RegistryError {
    RegistryError::MasterKey { message }
}

impl MasterKey {
    /// A fresh random key.
    pub fn generate() -> Result<Self> {
        let mut bytes = [0u8; MASTER_KEY_LEN];
        random_fill(&mut bytes)?;
        Ok(Self::from_bytes(bytes))
    }

    /// A key from raw bytes (for tests and for keys held elsewhere).
    pub fn from_bytes(bytes: [u8; MASTER_KEY_LEN]) -> Self {
        Self {
            bytes: Zeroizing::new(bytes),
        }
    }

    /// Reads a key file: 64 hexadecimal characters (surrounding whitespace ignored). On Unix
    /// the file must not be readable or writable by group or others.
    pub fn load(path: &Path) -> Result<Self> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let meta = std::fs::metadata(path)
                .map_err(|e| key_error(format!("cannot read {}: {e}", path.display())))?;
            let mode = meta.permissions().mode();
            if mode & 0o077 != 0 {
                return Err(key_error(format!(
                    "{} is accessible by other users (mode {:o}); chmod 600 it",
                    path.display(),
                    mode & 0o777
                )));
            }
        }
        let text = Zeroizing::new(
            std::fs::read_to_string(path)
                .map_err(|e| key_error(format!("cannot read {}: {e}", path.display())))?,
        );
        let hex = text.trim();
        let mut bytes = [0u8; MASTER_KEY_LEN];
        if hex.len() != MASTER_KEY_LEN * 2 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(key_error(format!(
                "{} does not hold 64 hexadecimal characters",
                path.display()
            )));
        }
        for (i, byte) in bytes.iter_mut().enumerate() {
            let pair = hex.get(2 * i..2 * i + 2).unwrap_or("00");
            *byte = u8::from_str_radix(pair, 16).map_err(|_| {
                key_error(format!(
                    "{} holds a non-hexadecimal character",
                    path.display()
                ))
            })?;
        }
        Ok(Self::from_bytes(bytes))
    }

    /// Loads the key at `path`, or creates it (mode 0600, created exclusively so two starting
    /// processes never write two different keys) when the file does not exist.
    pub fn load_or_create(path: &Path) -> Result<Self> {
        if path.exists() {
            return Self::load(path);
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| key_error(format!("cannot create {}: {e}", parent.display())))?;
        }
        let key = Self::generate()?;
        // Write a complete private file under a temporary name, then link it into place: the
        // link fails if the key exists, so concurrent starters never see a half-written key
        // and never replace one another's.
        let mut suffix = [0u8; 8];
        random_fill(&mut suffix)?;
        let tmp = path.with_extension(format!("tmp-{}", to_hex(&suffix)));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let written = options.open(&tmp).and_then(|mut file| {
            let hex = Zeroizing::new(to_hex(&key.bytes[..]));
            file.write_all(hex.as_bytes())?;
            file.write_all(b"\n")?;
            file.sync_all()
        });
        let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            // Another process created it first: use theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Self::load(path),
            Err(e) => return Err(key_error(format!("cannot create {}: {e}", path.display()))),
        }
        Ok(key)
    }

    /// Derives a 32-byte subkey for one purpose (HMAC-SHA256 of the label under the master key),
    /// so the API-key hash key and the encryption key are independent.
    fn subkey(&self, label: &[u8]) -> Zeroizing<[u8; 32]> {
        let mut mac =
            HmacSha256::new_from_slice(&self.bytes[..]).unwrap_or_else(|_| unreachable_hmac());
        mac.update(label);
        let out = mac.finalize().into_bytes();
        let mut key = [0u8; 32];
        key.copy_from_slice(&out[..]);
        Zeroizing::new(key)
    }
}

type HmacSha256 = Hmac<Sha256>;

// HMAC accepts keys of any length, so `new_from_slice` cannot fail.
fn unreachable_hmac() -> HmacSha256 {
    unreachable!("HMAC accepts keys of any length")
}

fn to_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

pub(crate) fn random_fill(buf: &mut [u8]) -> Result<()> {
    getrandom::fill(buf).map_err(|e| RegistryError::Internal {
        message: format!("the operating system's random source failed: {e}"),
    })
}

// ---------------------------------------------------------------------------------------------
// API keys: `crl_<keyid>_<secret><checksum>`.

/// The fixed prefix of every Corral API key. Never change it: scanners look for it.
pub const API_KEY_PREFIX: &str = "crl_";
const CROCKFORD_LOWER: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
/// Key id: 16 base32 characters (80 random bits), stored in clear.
const KEY_ID_LEN: usize = 16;
/// Secret: 52 base32 characters (260 bits; 256 random).
const SECRET_LEN: usize = 52;
/// Checksum: CRC-32 of everything before it, as 7 base32 characters.
const CHECKSUM_LEN: usize = 7;

fn base32(bytes: &[u8], len: usize) -> String {
    // Big-endian bit stream, 5 bits per character, zero-padded at the end.
    let mut out = String::with_capacity(len);
    let mut acc: u64 = 0;
    let mut bits = 0u32;
    let mut iter = bytes.iter();
    while out.len() < len {
        if bits < 5 {
            let next = iter.next().copied().unwrap_or(0);
            acc = (acc << 8) | u64::from(next);
            bits += 8;
        }
        let index = (acc >> (bits - 5)) & 31;
        bits -= 5;
        out.push(char::from(CROCKFORD_LOWER[index as usize]));
    }
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xedb8_8320 & mask);
        }
    }
    !crc
}

fn checksum(body: &str) -> String {
    base32(&crc32(body.as_bytes()).to_be_bytes(), CHECKSUM_LEN)
}

/// A syntactically valid API key, split into its parts.
pub(crate) struct ParsedApiKey<'a> {
    pub(crate) key_id: &'a str,
    pub(crate) secret: &'a str,
}

/// Makes a new key: (key id, full key).
pub(crate) fn generate_api_key() -> Result<(String, SecretString)> {
    let mut id_bytes = [0u8; 10];
    random_fill(&mut id_bytes)?;
    let mut secret_bytes = Zeroizing::new([0u8; 33]);
    random_fill(&mut secret_bytes[..32])?;
    let key_id = base32(&id_bytes, KEY_ID_LEN);
    let secret = Zeroizing::new(base32(&secret_bytes[..], SECRET_LEN));
    let body = Zeroizing::new(format!("{API_KEY_PREFIX}{key_id}_{}", secret.as_str()));
    let full = format!("{}{}", body.as_str(), checksum(&body));
    Ok((key_id, SecretString::from(full)))
}

/// The key id of `presented` when it has an API key's shape (`crl_<keyid>_<secret><checksum>`,
/// lowercase Crockford base32) and a valid checksum; `None` otherwise. This is all an
/// authentication checks before any database access.
pub fn api_key_id(presented: &str) -> Option<&str> {
    parse_api_key(presented).map(|k| k.key_id)
}

/// Splits a presented key, checking its shape and checksum before any database access.
pub(crate) fn parse_api_key(presented: &str) -> Option<ParsedApiKey<'_>> {
    let rest = presented.strip_prefix(API_KEY_PREFIX)?;
    let (key_id, tail) = rest.split_once('_')?;
    let well_formed = key_id.len() == KEY_ID_LEN
        && tail.len() == SECRET_LEN + CHECKSUM_LEN
        && key_id
            .bytes()
            .chain(tail.bytes())
            .all(|b| CROCKFORD_LOWER.contains(&b));
    if !well_formed {
        return None;
    }
    let (secret, sum) = tail.split_at(SECRET_LEN);
    let body = presented.get(..presented.len() - CHECKSUM_LEN)?;
    if !bool::from(checksum(body).as_bytes().ct_eq(sum.as_bytes())) {
        return None;
    }
    Some(ParsedApiKey { key_id, secret })
}

impl MasterKey {
    /// The stored hash of an API key: HMAC-SHA256 under a subkey, over key id and secret.
    pub(crate) fn api_key_hash(&self, key_id: &str, secret: &str) -> Vec<u8> {
        let subkey = self.subkey(b"corral/api-key-hash/v1");
        let mut mac =
            HmacSha256::new_from_slice(&subkey[..]).unwrap_or_else(|_| unreachable_hmac());
        mac.update(key_id.as_bytes());
        mac.update(b":");
        mac.update(secret.as_bytes());
        mac.finalize().into_bytes().to_vec()
    }

    /// Encrypts a credential: `nonce (24 bytes) || XChaCha20-Poly1305 ciphertext`, with the
    /// associated data binding it to its row.
    pub(crate) fn seal(&self, aad: &[u8], plaintext: &SecretString) -> Result<Vec<u8>> {
        let key = self.subkey(b"corral/profile-credential/v1");
        let cipher =
            XChaCha20Poly1305::new_from_slice(&key[..]).map_err(|_| internal("aead key"))?;
        let mut nonce = [0u8; 24];
        random_fill(&mut nonce)?;
        let sealed = cipher
            .encrypt(
                &nonce.into(),
                Payload {
                    msg: plaintext.expose_secret().as_bytes(),
                    aad,
                },
            )
            .map_err(|_| internal("encryption failed"))?;
        let mut out = Vec::with_capacity(24 + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Ok(out)
    }

    /// Decrypts what [`MasterKey::seal`] produced for the same associated data.
    pub(crate) fn open(&self, aad: &[u8], stored: &[u8]) -> Result<SecretString> {
        let key = self.subkey(b"corral/profile-credential/v1");
        let cipher =
            XChaCha20Poly1305::new_from_slice(&key[..]).map_err(|_| internal("aead key"))?;
        if stored.len() < 24 {
            return Err(RegistryError::CredentialUndecryptable);
        }
        let (nonce, sealed) = stored.split_at(24);
        let mut nonce_bytes = [0u8; 24];
        nonce_bytes.copy_from_slice(nonce);
        let plain = Zeroizing::new(
            cipher
                .decrypt(&nonce_bytes.into(), Payload { msg: sealed, aad })
                .map_err(|_| RegistryError::CredentialUndecryptable)?,
        );
        let text =
            std::str::from_utf8(&plain).map_err(|_| RegistryError::CredentialUndecryptable)?;
        Ok(SecretString::from(text.to_owned()))
    }
}

// ---------------------------------------------------------------------------------------------
// E2B access tokens: `<project id>.<key id>.<expiry, unix seconds>.<base64url tag>`, the tag an
// HMAC-SHA256 under a subkey over the four fields and the sandbox id.

/// Subkey label of the E2B in-sandbox access tokens (used for nothing else). `v2`: a token names
/// the API key it was issued to and when it ends; a `v1` token (project and sandbox only)
/// never verifies under this subkey.
const E2B_TOKEN_LABEL: &[u8] = b"corral/e2b-envd-token/v2";
/// Longest token worth parsing: a project id (30), a key id, an expiry, three dots and 43
/// base64url characters.
const E2B_TOKEN_MAX_LEN: usize = 160;

/// What a verified E2B access token says: whose it is, which API key it was issued to, and
/// when it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E2bTokenClaims {
    /// The sandbox's project.
    pub project: ProjectId,
    /// The public id of the API key the token was issued to: revoking that key ends it.
    pub key_id: String,
    /// When the token stops opening the sandbox (unix seconds).
    pub expires_at: i64,
}

impl MasterKey {
    fn e2b_token_mac(
        &self,
        project: &str,
        key_id: &str,
        expires_at: &str,
        sandbox: &str,
    ) -> HmacSha256 {
        let subkey = self.subkey(E2B_TOKEN_LABEL);
        let mut mac =
            HmacSha256::new_from_slice(&subkey[..]).unwrap_or_else(|_| unreachable_hmac());
        // No field holds a NUL, so the message names exactly one tuple.
        for field in [project, key_id, expires_at, sandbox] {
            mac.update(field.as_bytes());
            mac.update(b"\0");
        }
        mac
    }

    /// The access token of `sandbox` of `project` for E2B's in-sandbox API, issued to API key
    /// `key_id` until `expires_at` (unix seconds): stateless, so any replica holding the
    /// master key issues and checks the same token.
    pub(crate) fn e2b_access_token(
        &self,
        project: ProjectId,
        key_id: &str,
        expires_at: i64,
        sandbox: SandboxId,
    ) -> String {
        let project = project.to_string();
        let expires = expires_at.to_string();
        let tag = self
            .e2b_token_mac(&project, key_id, &expires, &sandbox.to_string())
            .finalize()
            .into_bytes();
        format!(
            "{project}.{key_id}.{expires}.{}",
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// What a presented token says when it is this key's token for `sandbox` (the tag
    /// compared in constant time); `None` for anything else, malformed included. Neither the
    /// expiry nor the API key's state is checked here.
    pub(crate) fn check_e2b_access_token(
        &self,
        sandbox: SandboxId,
        token: &str,
    ) -> Option<E2bTokenClaims> {
        if token.len() > E2B_TOKEN_MAX_LEN {
            return None;
        }
        let mut fields = token.split('.');
        let (project_text, key_id, expires_text, tag_text) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        if fields.next().is_some()
            || key_id.is_empty()
            || !key_id.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return None;
        }
        let project: ProjectId = project_text.parse().ok()?;
        let expires_at: i64 = expires_text.parse().ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag_text).ok()?;
        // `verify_slice` compares in constant time (and refuses a tag of another length).
        self.e2b_token_mac(project_text, key_id, expires_text, &sandbox.to_string())
            .verify_slice(&tag)
            .ok()?;
        Some(E2bTokenClaims {
            project,
            key_id: key_id.to_owned(),
            expires_at,
        })
    }
}

fn internal(what: &str) -> RegistryError {
    RegistryError::Internal {
        message: what.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_parse_and_a_changed_character_fails_the_checksum() {
        let (key_id, key) = generate_api_key().unwrap();
        let text = key.expose_secret().to_owned();
        let parsed = parse_api_key(&text).unwrap();
        assert_eq!(parsed.key_id, key_id);
        let mut bytes = text.into_bytes();
        let i = 30;
        bytes[i] = if bytes[i] == b'a' { b'b' } else { b'a' };
        assert!(parse_api_key(std::str::from_utf8(&bytes).unwrap()).is_none());
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }
}
