//! uaring: an OPC UA server for Linux, thread-per-core on io_uring, as a library.
//!
//! ```no_run
//! use uaring::{Server, VariableDef};
//!
//! let mut builder = Server::builder().listen("127.0.0.1:4840");
//! let ns = builder.namespace("urn:example:minimal");
//! let temperature = builder.add_variable(VariableDef::new(ns.id("Temperature"), "Temperature", 20.0));
//! let server = builder.start()?;
//! temperature.set(21.5)?; // from any thread, lock-free
//! server.run_until_signal()?;
//! # Ok::<(), uaring::Error>(())
//! ```
//!
//! docs/Embedding.md is the guide: the ways to give a Variable its value, client Writes,
//! methods, events, and which code runs on which thread.
//!
//! # The runtime underneath
//!
//! One pinned thread per selected CPU runs its own event loop on io_uring
//! ([`uring::UringLoop`]) or, where io_uring cannot be set up, on epoll
//! ([`epoll::EpollLoop`]). Each loop owns its sockets and drives a
//! [`Handler`] — the OPC UA server (core's `ServiceState` + `ServerConnection`)
//! or any other protocol (the load client, the echo handler). Nothing on the
//! request path is shared between shards.

pub mod background;
mod builder;
pub mod check;
pub mod cli;
pub mod clock;
pub mod config;
mod conn;
pub mod content;
pub mod epoll;
mod error;
pub mod event_loop;
pub mod fleet;
pub mod gateway;
pub mod handler;
pub mod handshake_pool;
pub mod history;
mod loop_core;
pub mod memlock;
pub mod metrics;
pub mod net;
mod nodes;
pub mod notify;
pub mod push;
pub mod random;
pub mod reverse;
pub mod runtime;
pub mod security;
pub mod spsc;
pub mod sqpoll;
pub mod stats;
pub mod ua_handler;
pub mod uring;
mod workers;

/// docs/Embedding.md, compiled as doc tests (every example there builds).
#[cfg(doctest)]
#[doc = include_str!("../../docs/Embedding.md")]
pub struct EmbeddingGuide;

pub use builder::{EventDef, Events, Server, ServerBuilder, ServerHandle, DEFAULT_CONFIG};
pub use error::Error;
pub use nodes::{
    objects_folder, server_object, set_many, Alarm, AlarmDef, AlarmState, EventTypeDef, MethodDef,
    Namespace, NodeRef, ObjectDef, Variable, VariableDef,
};
/// What the application's callbacks see and return (core's types).
pub use uaring_core::address_space::app::{
    ArgDef, AsyncCall, AsyncRead, AsyncWrite, ConditionAction, ConditionActionInfo, MethodCall,
    ReadFn, WriteInfo,
};
pub use uaring_core::address_space::edit::Edit;
/// Roles and permissions per node ([`ServerBuilder::role_permissions`]).
pub use uaring_core::generated::types::PermissionType as Permissions;
pub use uaring_core::roles::{RolePermissions, WellKnownRole};
pub use uaring_core::{
    BuiltinType, ByteString, DataValue, DateTime, ExtensionObject, Guid, Identifier, LocalizedText,
    NodeId, Now, QualifiedName, StatusCode, UaString, Variant,
};
pub use workers::Workers;

pub use config::{Distribution, FileConfig, IoBackend, RuntimeConfig, Sqpoll};
pub use event_loop::EventLoop;
pub use fleet::{Fleet, ShardWiring, StatsSnapshot, Waker};
pub use handler::{ConnId, ConnStatus, EchoHandler, Handler, Origin};
pub use loop_core::LoopConfig;
