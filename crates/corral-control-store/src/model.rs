//! The control plane's identifiers and shared vocabulary.

use std::fmt;
use std::str::FromStr;

use corral_domain::{ParseIdError, Timestamp};
use ulid::Ulid;

/// Declares an id type `<prefix><lowercase ulid>` with `new`, `Display` and a `FromStr` that
/// accepts only the canonical spelling.
macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Ulid);

        impl $name {
            /// A fresh id.
            pub fn new() -> Self {
                Self(Ulid::generate())
            }

            /// The id with this ULID.
            #[allow(dead_code)] // Not every id type is built from a chosen ULID.
            pub(crate) const fn from_ulid(ulid: Ulid) -> Self {
                Self(ulid)
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{}", $prefix, self.0.to_string().to_ascii_lowercase())
            }
        }

        impl FromStr for $name {
            type Err = ParseIdError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let payload = s.strip_prefix($prefix).ok_or(ParseIdError::Prefix)?;
                let canonical = payload.len() == 26
                    && payload
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase());
                if !canonical {
                    return Err(ParseIdError::Payload);
                }
                let ulid = Ulid::from_string(payload).map_err(|_| ParseIdError::Payload)?;
                if ulid.to_string().to_ascii_lowercase() != payload {
                    return Err(ParseIdError::Payload);
                }
                Ok(Self(ulid))
            }
        }
    };
}

prefixed_id!(
    /// A user: `usr_<ulid>`.
    UserId,
    "usr_"
);
prefixed_id!(
    /// An account (personal or organization): `acc_<ulid>`.
    AccountId,
    "acc_"
);
prefixed_id!(
    /// An invitation: `inv_<ulid>`.
    InvitationId,
    "inv_"
);
prefixed_id!(
    /// An audit event: `aud_<ulid>`.
    AuditEventId,
    "aud_"
);

/// A member's role in an account, strongest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything, including deleting the account, transferring ownership and reading the
    /// audit log.
    Owner,
    /// Members, invitations, projects, keys and profiles.
    Admin,
    /// Reads.
    Member,
}

impl Role {
    /// The stored and wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "owner" => Some(Role::Owner),
            "admin" => Some(Role::Admin),
            "member" => Some(Role::Member),
            _ => None,
        }
    }

    /// Whether this role is at least `needed`.
    pub const fn at_least(self, needed: Role) -> bool {
        self.rank() >= needed.rank()
    }

    const fn rank(self) -> u8 {
        match self {
            Role::Owner => 3,
            Role::Admin => 2,
            Role::Member => 1,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether an account belongs to one person or is an organization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccountKind {
    /// Created with its user; exactly one member, its owner, for ever.
    Personal,
    /// Owners, admins and members.
    Organization,
}

impl AccountKind {
    /// The stored and wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            AccountKind::Personal => "personal",
            AccountKind::Organization => "organization",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "personal" => Some(AccountKind::Personal),
            "organization" => Some(AccountKind::Organization),
            _ => None,
        }
    }
}

/// One entry of the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    /// Its id.
    pub id: AuditEventId,
    /// The account the change belongs to (none for user-level events such as a sign-in).
    pub account_id: Option<AccountId>,
    /// Who did it (none for the operator's CLI and background work).
    pub actor: Option<UserId>,
    /// What was done, e.g. `"project.create"`.
    pub action: String,
    /// What it was done to, e.g. a project id.
    pub target: String,
    /// Non-secret details as a JSON object.
    pub detail: serde_json::Value,
    /// When.
    pub created_at: Timestamp,
}

/// An audit event to record.
#[derive(Debug, Clone)]
pub struct NewAuditEvent {
    /// See [`AuditEvent::account_id`].
    pub account_id: Option<AccountId>,
    /// See [`AuditEvent::actor`].
    pub actor: Option<UserId>,
    /// See [`AuditEvent::action`].
    pub action: String,
    /// See [`AuditEvent::target`].
    pub target: String,
    /// See [`AuditEvent::detail`]. Never put a secret here.
    pub detail: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_refuse_other_prefixes_and_spellings() {
        let id = UserId::new();
        assert_eq!(id.to_string().parse::<UserId>(), Ok(id));
        assert!(
            id.to_string()
                .replace("usr_", "acc_")
                .parse::<UserId>()
                .is_err()
        );
        assert!(id.to_string().to_uppercase().parse::<UserId>().is_err());
        assert!("usr_".parse::<UserId>().is_err());
    }

    #[test]
    fn roles_are_ordered_owner_admin_member() {
        assert!(Role::Owner.at_least(Role::Admin));
        assert!(Role::Admin.at_least(Role::Admin));
        assert!(!Role::Member.at_least(Role::Admin));
        for r in [Role::Owner, Role::Admin, Role::Member] {
            assert_eq!(Role::parse(r.as_str()), Some(r));
        }
    }
}
