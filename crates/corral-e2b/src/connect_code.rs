//! Connect's error codes (<https://connectrpc.com/docs/protocol#error-codes>): each code's
//! name on the wire and the HTTP status of a unary call failing with it, in one table that
//! envd's filesystem calls ([`crate::fs`]) and every other failure of the door
//! ([`crate::E2bError`]) read.

use std::fmt;

/// A Connect error code (<https://connectrpc.com/docs/protocol#error-codes>).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectCode {
    /// `canceled`
    Canceled,
    /// `unknown`
    Unknown,
    /// `invalid_argument`
    InvalidArgument,
    /// `deadline_exceeded`
    DeadlineExceeded,
    /// `not_found`
    NotFound,
    /// `already_exists`
    AlreadyExists,
    /// `permission_denied`
    PermissionDenied,
    /// `resource_exhausted`
    ResourceExhausted,
    /// `failed_precondition`
    FailedPrecondition,
    /// `aborted`
    Aborted,
    /// `out_of_range`
    OutOfRange,
    /// `unimplemented`
    Unimplemented,
    /// `internal`
    Internal,
    /// `unavailable`
    Unavailable,
    /// `data_loss`
    DataLoss,
    /// `unauthenticated`
    Unauthenticated,
}

impl ConnectCode {
    /// Every code, in Connect's order.
    pub const ALL: [ConnectCode; 16] = [
        ConnectCode::Canceled,
        ConnectCode::Unknown,
        ConnectCode::InvalidArgument,
        ConnectCode::DeadlineExceeded,
        ConnectCode::NotFound,
        ConnectCode::AlreadyExists,
        ConnectCode::PermissionDenied,
        ConnectCode::ResourceExhausted,
        ConnectCode::FailedPrecondition,
        ConnectCode::Aborted,
        ConnectCode::OutOfRange,
        ConnectCode::Unimplemented,
        ConnectCode::Internal,
        ConnectCode::Unavailable,
        ConnectCode::DataLoss,
        ConnectCode::Unauthenticated,
    ];

    /// The code's name on the wire (`"not_found"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectCode::Canceled => "canceled",
            ConnectCode::Unknown => "unknown",
            ConnectCode::InvalidArgument => "invalid_argument",
            ConnectCode::DeadlineExceeded => "deadline_exceeded",
            ConnectCode::NotFound => "not_found",
            ConnectCode::AlreadyExists => "already_exists",
            ConnectCode::PermissionDenied => "permission_denied",
            ConnectCode::ResourceExhausted => "resource_exhausted",
            ConnectCode::FailedPrecondition => "failed_precondition",
            ConnectCode::Aborted => "aborted",
            ConnectCode::OutOfRange => "out_of_range",
            ConnectCode::Unimplemented => "unimplemented",
            ConnectCode::Internal => "internal",
            ConnectCode::Unavailable => "unavailable",
            ConnectCode::DataLoss => "data_loss",
            ConnectCode::Unauthenticated => "unauthenticated",
        }
    }

    /// The code named `s` on the wire.
    pub fn from_name(s: &str) -> Option<ConnectCode> {
        ConnectCode::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The HTTP status Connect answers a unary call failing with this code.
    pub fn http_status(self) -> u16 {
        match self {
            ConnectCode::Canceled => 499,
            ConnectCode::Unknown => 500,
            ConnectCode::InvalidArgument => 400,
            ConnectCode::DeadlineExceeded => 504,
            ConnectCode::NotFound => 404,
            ConnectCode::AlreadyExists => 409,
            ConnectCode::PermissionDenied => 403,
            ConnectCode::ResourceExhausted => 429,
            ConnectCode::FailedPrecondition => 400,
            ConnectCode::Aborted => 409,
            ConnectCode::OutOfRange => 400,
            ConnectCode::Unimplemented => 501,
            ConnectCode::Internal => 500,
            ConnectCode::Unavailable => 503,
            ConnectCode::DataLoss => 500,
            ConnectCode::Unauthenticated => 401,
        }
    }
}

impl fmt::Display for ConnectCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_codes_have_connect_names_and_statuses() {
        let expected = [
            (ConnectCode::NotFound, "not_found", 404),
            (ConnectCode::AlreadyExists, "already_exists", 409),
            (ConnectCode::InvalidArgument, "invalid_argument", 400),
            (ConnectCode::PermissionDenied, "permission_denied", 403),
            (ConnectCode::Internal, "internal", 500),
            (ConnectCode::Unimplemented, "unimplemented", 501),
            (ConnectCode::Unauthenticated, "unauthenticated", 401),
            (ConnectCode::DeadlineExceeded, "deadline_exceeded", 504),
            (ConnectCode::Unavailable, "unavailable", 503),
            (ConnectCode::FailedPrecondition, "failed_precondition", 400),
            (ConnectCode::Canceled, "canceled", 499),
            (ConnectCode::ResourceExhausted, "resource_exhausted", 429),
        ];
        for (c, name, status) in expected {
            assert_eq!((c.as_str(), c.http_status()), (name, status));
            assert_eq!(ConnectCode::from_name(name), Some(c));
        }
        for c in ConnectCode::ALL {
            assert_eq!(ConnectCode::from_name(c.as_str()), Some(c));
        }
    }
}
