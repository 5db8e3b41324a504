//! `Idempotency-Key` validation and request fingerprints.

use std::fmt;

use corral_domain::limits::MAX_IDEMPOTENCY_KEY_LEN;
use sha2::{Digest, Sha256};

use crate::error::{IdempotencyError, Result};

/// A valid `Idempotency-Key`: 1–255 bytes of printable ASCII (space through `~`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Validates a header value.
    pub fn parse(value: &str) -> Result<Self> {
        if value.is_empty() {
            return Err(IdempotencyError::InvalidKey { reason: "empty" });
        }
        if value.len() > MAX_IDEMPOTENCY_KEY_LEN {
            return Err(IdempotencyError::InvalidKey {
                reason: "longer than 255 characters",
            });
        }
        if !value.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(IdempotencyError::InvalidKey {
                reason: "not printable ASCII",
            });
        }
        Ok(Self(value.to_owned()))
    }

    /// The key as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({:?})", self.0)
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Headers that carry secrets and are never part of a fingerprint, even if passed in.
pub const SECRET_HEADERS: &[&str] = &["authorization", "x-provider-credential", "cookie"];

/// SHA-256 over what makes two requests "the same": method, route template, canonical JSON
/// body and the non-secret headers that change behaviour.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint(")?;
        for b in &self.0[..6] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

impl Fingerprint {
    /// Computes the fingerprint. `route` is the template (e.g. `/v1/sandboxes`), not the
    /// concrete path; `headers` are (name, value) pairs of non-secret headers that change
    /// behaviour (e.g. `x-provider`, `x-provider-profile`, `x-provider-bridge-url`). Names are
    /// compared case-insensitively and order does not matter; names in [`SECRET_HEADERS`] are
    /// dropped. The body is canonicalized (object keys sorted, no whitespace), so key order and
    /// formatting do not change the fingerprint.
    pub fn compute(
        method: &str,
        route: &str,
        body: Option<&serde_json::Value>,
        headers: &[(&str, &str)],
    ) -> Self {
        let mut hasher = Sha256::new();
        // Length-prefixed fields so that no two different inputs hash the same bytes.
        let mut field = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_be_bytes());
            hasher.update(bytes);
        };
        field(method.to_ascii_uppercase().as_bytes());
        field(route.as_bytes());
        let mut canonical = String::new();
        match body {
            Some(value) => canonical_json(value, &mut canonical),
            None => canonical.push('-'),
        }
        field(canonical.as_bytes());
        let mut hs: Vec<(String, &str)> = headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), *v))
            .filter(|(n, _)| !SECRET_HEADERS.contains(&n.as_str()))
            .collect();
        hs.sort();
        field(&(hs.len() as u64).to_be_bytes());
        for (name, value) in hs {
            field(name.as_bytes());
            field(value.as_bytes());
        }
        Self(hasher.finalize().into())
    }

    /// The raw digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Rebuilds a stored digest.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

/// Writes `value` as canonical JSON: object keys sorted by their UTF-8 bytes, no whitespace.
/// Sorting is explicit so the result does not depend on serde_json's map type.
pub fn canonical_json(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical_json(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}
