//! gRPC status codes. The same code reaches the caller whichever processor ran the element.

use std::fmt;
use std::str::FromStr;

/// A gRPC status code (<https://grpc.github.io/grpc/core/md_doc_statuscodes.html>).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

const NAMES: [(&str, Code); 17] = [
    ("OK", Code::Ok),
    ("CANCELLED", Code::Cancelled),
    ("UNKNOWN", Code::Unknown),
    ("INVALID_ARGUMENT", Code::InvalidArgument),
    ("DEADLINE_EXCEEDED", Code::DeadlineExceeded),
    ("NOT_FOUND", Code::NotFound),
    ("ALREADY_EXISTS", Code::AlreadyExists),
    ("PERMISSION_DENIED", Code::PermissionDenied),
    ("RESOURCE_EXHAUSTED", Code::ResourceExhausted),
    ("FAILED_PRECONDITION", Code::FailedPrecondition),
    ("ABORTED", Code::Aborted),
    ("OUT_OF_RANGE", Code::OutOfRange),
    ("UNIMPLEMENTED", Code::Unimplemented),
    ("INTERNAL", Code::Internal),
    ("UNAVAILABLE", Code::Unavailable),
    ("DATA_LOSS", Code::DataLoss),
    ("UNAUTHENTICATED", Code::Unauthenticated),
];

impl Code {
    /// The canonical upper-case name, e.g. `PERMISSION_DENIED`.
    pub fn name(self) -> &'static str {
        NAMES[self as usize].0
    }

    /// The numeric value carried in `grpc-status`.
    pub fn number(self) -> u32 {
        self as u32
    }

    pub fn from_number(n: u32) -> Option<Code> {
        NAMES.get(n as usize).map(|(_, c)| *c)
    }

    /// Every code name, for "did you mean" hints.
    pub fn all_names() -> impl Iterator<Item = &'static str> {
        NAMES.iter().map(|(n, _)| *n)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The name is not one of the 17 gRPC status code names.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a gRPC status code name")]
pub struct UnknownCode(pub String);

impl FromStr for Code {
    type Err = UnknownCode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NAMES
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, c)| *c)
            .ok_or_else(|| UnknownCode(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_round_trip() {
        for n in 0..17 {
            let code = Code::from_number(n).unwrap();
            assert_eq!(code.number(), n);
            assert_eq!(code.name().parse::<Code>().unwrap(), code);
        }
        assert!(Code::from_number(17).is_none());
        assert_eq!(Code::PermissionDenied.number(), 7);
        assert!("permission_denied".parse::<Code>().is_err());
    }
}
