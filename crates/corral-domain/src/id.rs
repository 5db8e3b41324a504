use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use ulid::Ulid;

use crate::provider::Provider;

/// Lowercase Crockford base32, the alphabet of the ULID payloads in Corral ids.
const CROCKFORD_LOWER: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
const ULID_LEN: usize = 26;

/// The canonical ULID payload as a regular expression: lowercase Crockford base32, the first
/// character at most `7`.
pub const ULID_PATTERN: &str = "[0-7][0-9a-hjkmnp-tv-z]{25}";

/// A regular expression matching exactly the strings that parse as a [`SandboxId`]:
/// `sbx_<provider>_<ulid>` with a known provider (anchored).
pub fn sandbox_id_pattern() -> String {
    let providers: Vec<&str> = Provider::ALL.iter().map(|p| p.as_str()).collect();
    format!("^sbx_({})_{ULID_PATTERN}$", providers.join("|"))
}

/// An opaque, project-scoped sandbox id: `sbx_<provider>_<ulid>`.
///
/// The provider is visible; the random payload is a ULID in lowercase Crockford base32 and
/// encodes nothing about the provider-native id. Only the canonical form parses, so an id has
/// exactly one spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SandboxId {
    provider: Provider,
    ulid: Ulid,
}

impl SandboxId {
    /// A fresh id for a sandbox on `provider`.
    pub fn new(provider: Provider) -> Self {
        Self {
            provider,
            ulid: Ulid::generate(),
        }
    }

    /// Builds an id from its parts (for tests and for the registry).
    pub const fn from_parts(provider: Provider, ulid: Ulid) -> Self {
        Self { provider, ulid }
    }

    /// The provider the sandbox lives on.
    pub const fn provider(&self) -> Provider {
        self.provider
    }

    /// The random payload.
    pub const fn ulid(&self) -> Ulid {
        self.ulid
    }
}

impl fmt::Display for SandboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sbx_{}_{}", self.provider, lower_ulid(self.ulid))
    }
}

/// Why a text is not a Corral id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseIdError {
    /// The fixed prefix (`sbx_`, `snp_`, `op_` or `cmd_`) is missing.
    Prefix,
    /// The provider segment names no provider.
    UnknownProvider,
    /// The payload is not a canonical lowercase ULID.
    Payload,
}

impl fmt::Display for ParseIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParseIdError::Prefix => "id does not start with the expected prefix",
            ParseIdError::UnknownProvider => "id names an unknown provider",
            ParseIdError::Payload => "id payload is not a lowercase 26-character ULID",
        })
    }
}

impl std::error::Error for ParseIdError {}

impl FromStr for SandboxId {
    type Err = ParseIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s.strip_prefix("sbx_").ok_or(ParseIdError::Prefix)?;
        let (provider, payload) = rest.split_once('_').ok_or(ParseIdError::Prefix)?;
        let provider = provider
            .parse::<Provider>()
            .map_err(|_| ParseIdError::UnknownProvider)?;
        Ok(Self {
            provider,
            ulid: parse_lower_ulid(payload)?,
        })
    }
}

/// A regular expression matching exactly the strings that parse as a [`SnapshotId`]:
/// `snp_<provider>_<ulid>` with a known provider (anchored).
pub fn snapshot_id_pattern() -> String {
    let providers: Vec<&str> = Provider::ALL.iter().map(|p| p.as_str()).collect();
    format!("^snp_({})_{ULID_PATTERN}$", providers.join("|"))
}

/// An opaque, project-scoped snapshot id: `snp_<provider>_<ulid>`, shaped like a
/// [`SandboxId`] (the provider visible, the payload random), so a restore can be checked
/// against the provider it names before any provider call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SnapshotId {
    provider: Provider,
    ulid: Ulid,
}

impl SnapshotId {
    /// A fresh id for a snapshot on `provider`.
    pub fn new(provider: Provider) -> Self {
        Self {
            provider,
            ulid: Ulid::generate(),
        }
    }

    /// Builds an id from its parts (for tests and for the registry).
    pub const fn from_parts(provider: Provider, ulid: Ulid) -> Self {
        Self { provider, ulid }
    }

    /// The provider holding the snapshot.
    pub const fn provider(&self) -> Provider {
        self.provider
    }

    /// The random payload.
    pub const fn ulid(&self) -> Ulid {
        self.ulid
    }
}

impl fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "snp_{}_{}", self.provider, lower_ulid(self.ulid))
    }
}

impl FromStr for SnapshotId {
    type Err = ParseIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let rest = s.strip_prefix("snp_").ok_or(ParseIdError::Prefix)?;
        let (provider, payload) = rest.split_once('_').ok_or(ParseIdError::Prefix)?;
        let provider = provider
            .parse::<Provider>()
            .map_err(|_| ParseIdError::UnknownProvider)?;
        Ok(Self {
            provider,
            ulid: parse_lower_ulid(payload)?,
        })
    }
}

/// The logical id of one create operation, tagged onto the provider resource so that a create
/// whose answer was lost can be found again: `op_<ulid>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationId(Ulid);

impl OperationId {
    /// A fresh operation id.
    pub fn new() -> Self {
        Self(Ulid::generate())
    }

    /// The random payload.
    pub const fn ulid(&self) -> Ulid {
        self.0
    }
}

impl Default for OperationId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op_{}", lower_ulid(self.0))
    }
}

impl FromStr for OperationId {
    type Err = ParseIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let payload = s.strip_prefix("op_").ok_or(ParseIdError::Prefix)?;
        Ok(Self(parse_lower_ulid(payload)?))
    }
}

/// A command started as a durable job in a sandbox: `cmd_<ulid>`, project-scoped like sandbox
/// ids (another project's command is indistinguishable from a missing one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommandId(Ulid);

impl CommandId {
    /// A fresh command id.
    pub fn new() -> Self {
        Self(Ulid::generate())
    }

    /// Builds an id from its payload (for the registry).
    pub const fn from_ulid(ulid: Ulid) -> Self {
        Self(ulid)
    }

    /// The random payload.
    pub const fn ulid(&self) -> Ulid {
        self.0
    }
}

impl Default for CommandId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for CommandId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cmd_{}", lower_ulid(self.0))
    }
}

impl FromStr for CommandId {
    type Err = ParseIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let payload = s.strip_prefix("cmd_").ok_or(ParseIdError::Prefix)?;
        Ok(Self(parse_lower_ulid(payload)?))
    }
}

fn lower_ulid(u: Ulid) -> String {
    u.to_string().to_ascii_lowercase()
}

fn parse_lower_ulid(s: &str) -> Result<Ulid, ParseIdError> {
    let bytes = s.as_bytes();
    // 26 base32 digits carry 130 bits; a ULID has 128, so the first digit is at most 7.
    let canonical = bytes.len() == ULID_LEN
        && bytes.iter().all(|b| CROCKFORD_LOWER.contains(b))
        && bytes[0] <= b'7';
    if !canonical {
        return Err(ParseIdError::Payload);
    }
    Ulid::from_string(&s.to_ascii_uppercase()).map_err(|_| ParseIdError::Payload)
}

macro_rules! string_serde {
    ($t:ty, $what:literal) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse()
                    .map_err(|e| serde::de::Error::custom(format_args!("invalid {}: {e}", $what)))
            }
        }
    };
}

string_serde!(SandboxId, "sandbox id");
string_serde!(OperationId, "operation id");
string_serde!(CommandId, "command id");
string_serde!(SnapshotId, "snapshot id");

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn any_provider() -> impl Strategy<Value = Provider> {
        proptest::sample::select(Provider::ALL.to_vec())
    }

    fn any_ulid() -> impl Strategy<Value = Ulid> {
        any::<u128>().prop_map(Ulid::from)
    }

    proptest! {
        #[test]
        fn snapshot_id_round_trips_and_is_not_a_sandbox_id(p in any_provider(), u in any_ulid()) {
            let id = SnapshotId::from_parts(p, u);
            let text = id.to_string();
            let prefix = format!("snp_{p}_");
            prop_assert!(text.starts_with(&prefix));
            prop_assert_eq!(text.parse::<SnapshotId>().unwrap(), id);
            prop_assert!(text.parse::<SandboxId>().is_err());
        }

        #[test]
        fn sandbox_id_round_trips(p in any_provider(), u in any_ulid()) {
            let id = SandboxId::from_parts(p, u);
            let text = id.to_string();
            let prefix = format!("sbx_{p}_");
            prop_assert!(text.starts_with(&prefix));
            prop_assert_eq!(text.len(), 4 + p.as_str().len() + 1 + ULID_LEN);
            prop_assert_eq!(text.parse::<SandboxId>(), Ok(id));
            let json = serde_json::to_string(&id).unwrap();
            prop_assert_eq!(serde_json::from_str::<SandboxId>(&json).unwrap(), id);
        }

        #[test]
        fn operation_id_round_trips(u in any_ulid()) {
            let id = OperationId(u);
            prop_assert_eq!(id.to_string().parse::<OperationId>(), Ok(id));
        }

        #[test]
        fn command_id_round_trips(u in any_ulid()) {
            let id = CommandId(u);
            prop_assert_eq!(id.to_string().parse::<CommandId>(), Ok(id));
            prop_assert!(id.to_string().starts_with("cmd_"));
        }

        #[test]
        fn arbitrary_text_never_panics_and_only_canonical_ids_parse(s in "\\PC{0,48}") {
            if let Ok(id) = s.parse::<SandboxId>() {
                prop_assert_eq!(id.to_string(), s);
            }
        }

        #[test]
        fn uppercase_payload_is_rejected(p in any_provider(), u in any_ulid()) {
            let text = format!("sbx_{p}_{u}");
            // Ulid's Display is uppercase; a payload with any letter must be refused.
            if u.to_string().bytes().any(|b| b.is_ascii_alphabetic()) {
                prop_assert_eq!(text.parse::<SandboxId>(), Err(ParseIdError::Payload));
            }
        }

        #[test]
        fn any_single_character_edit_of_the_payload_outside_the_alphabet_is_rejected(
            p in any_provider(), u in any_ulid(), pos in 0usize..ULID_LEN,
            c in "[^0-9a-hjkmnp-tv-z]",
        ) {
            let mut payload = lower_ulid(u);
            payload.replace_range(pos..=pos, &c);
            let text = format!("sbx_{p}_{payload}");
            prop_assert!(text.parse::<SandboxId>().is_err());
        }
    }

    #[test]
    fn malformed_forms_are_rejected_with_the_right_reason() {
        let good = lower_ulid(Ulid::from(42u128));
        let cases = [
            (String::new(), ParseIdError::Prefix),
            (format!("sb_local_{good}"), ParseIdError::Prefix),
            (format!("SBX_local_{good}"), ParseIdError::Prefix),
            ("sbx_local".to_owned(), ParseIdError::Prefix),
            (format!("sbx_aws_{good}"), ParseIdError::UnknownProvider),
            (format!("sbx__{good}"), ParseIdError::UnknownProvider),
            (format!("sbx_LOCAL_{good}"), ParseIdError::UnknownProvider),
            ("sbx_local_".to_owned(), ParseIdError::Payload),
            (format!("sbx_local_{}", &good[1..]), ParseIdError::Payload),
            (format!("sbx_local_{good}0"), ParseIdError::Payload),
            (format!("sbx_local_{good}_x"), ParseIdError::Payload),
            (format!("sbx_local_8{}", &good[1..]), ParseIdError::Payload),
            (format!("sbx_local_{}u", &good[..25]), ParseIdError::Payload),
            (format!("sbx_local_{}i", &good[..25]), ParseIdError::Payload),
            (format!(" sbx_local_{good}"), ParseIdError::Prefix),
            (format!("sbx_local_{good} "), ParseIdError::Payload),
        ];
        for (text, want) in cases {
            assert_eq!(text.parse::<SandboxId>(), Err(want.clone()), "{text:?}");
        }
        assert!(format!("op_{good}").parse::<OperationId>().is_ok());
        assert!(format!("sbx_{good}").parse::<OperationId>().is_err());
    }

    #[test]
    fn largest_ulid_is_canonical_and_parses() {
        let id = SandboxId::from_parts(Provider::E2b, Ulid::from(u128::MAX));
        assert!(id.to_string().ends_with("_7zzzzzzzzzzzzzzzzzzzzzzzzz"));
        assert_eq!(id.to_string().parse::<SandboxId>(), Ok(id));
    }
}
