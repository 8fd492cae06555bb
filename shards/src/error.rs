//! The library's error type.

use uaring_core::StatusCode;

/// What can go wrong when building, starting or feeding a server.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The configuration (TOML or builder settings) is not valid; the message names the key.
    Config(String),
    /// A node definition does not fit the address space (duplicate NodeId, unknown parent
    /// or type, …).
    AddressSpace(String),
    /// Security set-up failed (PKI directory, own certificate, users).
    Security(String),
    /// The runtime did not start (listening socket, io_uring and locked memory, threads).
    Start(String),
    /// A handle was used before the server started.
    NotStarted,
    /// A pushed value does not fit the Variable's DataType or ValueRank (the node is named).
    TypeMismatch(String),
    /// The server answered an operation with this status.
    Status(StatusCode),
    /// A shard stopped with an error.
    Runtime(String),
    /// History was asked for and the server keeps none (no history store: `[history]
    /// enabled = false`, or no store opened at start).
    NoHistory,
    /// History was asked for a Variable added while the server runs and
    /// `history.max_run_time_historized` such Variables are historized already.
    HistoryLimit,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Config(e) => write!(f, "configuration: {e}"),
            Error::AddressSpace(e) => write!(f, "address space: {e}"),
            Error::Security(e) => write!(f, "security: {e}"),
            Error::Start(e) => f.write_str(e),
            Error::NotStarted => f.write_str("the server has not started"),
            Error::TypeMismatch(n) => write!(
                f,
                "{n}: the value does not fit the variable's DataType or ValueRank"
            ),
            Error::Status(s) => write!(f, "{s:?}"),
            Error::Runtime(e) => write!(f, "runtime: {e}"),
            Error::NoHistory => f.write_str("the server keeps no history ([history])"),
            Error::HistoryLimit => f.write_str(
                "history.max_run_time_historized Variables added at run time are historized already",
            ),
        }
    }
}

impl std::error::Error for Error {}
