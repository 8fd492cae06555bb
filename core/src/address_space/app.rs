//! What an application plugs into the address space besides stored values: computed values
//! (read callbacks), write hooks and method handlers. Each is an `Arc`'d closure set while
//! the address space is built ([`super::AddressSpaceBuilder`]) and called on the shard
//! that serves the request, so it must return quickly and never block (a device round trip
//! belongs on a thread of the application, which then pushes the value or answers later).
//!
//! Core runs them with the caller's [`Now`]; it measures nothing and reads no clock. The
//! runtime (the `uaring` library) wraps each closure it installs with its own timing.

use std::sync::Arc;

use crate::generated::types::Argument;
use crate::time::Now;
use crate::types::{BuiltinType, DataValue, ExtensionObject, LocalizedText, NodeId, StatusCode, UaString, Variant};

/// A computed value: called for every Read and every sample of the Variable, on the shard.
pub type ReadFn = Arc<dyn Fn(Now) -> DataValue + Send + Sync>;

/// What a write hook is told about a client's Write of a Variable's Value.
#[derive(Debug)]
pub struct WriteInfo<'a> {
    pub node_id: &'a NodeId,
    /// The value as it will be stored (SourceTimestamp filled in when the client sent none).
    pub value: &'a DataValue,
    /// The IndexRange of the Write ("" for the whole value).
    pub index_range: &'a str,
    pub now: Now,
}

/// Accepts (`Ok`: the value is stored, when the Variable stores values) or rejects a Write
/// with the operation's status.
pub type WriteHook = Arc<dyn Fn(&WriteInfo<'_>) -> Result<(), StatusCode> + Send + Sync>;

/// One declared argument of a method.
#[derive(Clone, Debug, PartialEq)]
pub struct ArgDef {
    pub name: String,
    /// A namespace-0 DataType of a built-in type.
    pub data_type: NodeId,
    /// The built-in type a value must have.
    pub builtin: BuiltinType,
    /// -1 scalar, 1 one-dimensional array.
    pub value_rank: i32,
    pub description: String,
}

impl ArgDef {
    /// A scalar argument of a built-in type.
    pub fn scalar(name: &str, builtin: BuiltinType) -> ArgDef {
        ArgDef {
            name: name.to_string(),
            data_type: NodeId::ns0(builtin as u32),
            builtin,
            value_rank: -1,
            description: String::new(),
        }
    }

    /// A one-dimensional array argument of a built-in type.
    pub fn array(name: &str, builtin: BuiltinType) -> ArgDef {
        ArgDef { value_rank: 1, ..ArgDef::scalar(name, builtin) }
    }

    /// The same, with a description.
    pub fn describe(mut self, description: &str) -> ArgDef {
        self.description = description.to_string();
        self
    }

    /// Does `v` match this declaration (Part 4 §5.11.2: no conversion; Null accepted for
    /// String, ByteString, LocalizedText and NodeId scalars and for arrays)?
    pub fn accepts(&self, v: &Variant) -> bool {
        match (self.value_rank, v) {
            (1, Variant::Empty) => true,
            (1, Variant::Array(a)) => a.value_type == self.builtin && matches!(a.dimensions.as_deref(), None | Some([_])),
            (1, _) => false,
            (_, Variant::Empty) => matches!(
                self.builtin,
                BuiltinType::String | BuiltinType::ByteString | BuiltinType::LocalizedText | BuiltinType::NodeId
            ),
            (_, v) => v.scalar_type() == Some(self.builtin),
        }
    }

    /// The Argument structure of the InputArguments / OutputArguments property.
    pub fn to_argument(&self) -> ExtensionObject {
        ExtensionObject::from_struct(&Argument {
            name: UaString::from(self.name.as_str()),
            data_type: self.data_type.clone(),
            value_rank: self.value_rank,
            array_dimensions: if self.value_rank == 1 { vec![0] } else { Vec::new() },
            description: LocalizedText::new("", &self.description),
        })
    }
}

/// One call of an application method, after the server checked the arguments against
/// their declaration.
#[derive(Debug)]
pub struct MethodCall<'a> {
    pub object_id: &'a NodeId,
    pub method_id: &'a NodeId,
    pub inputs: &'a [Variant],
    /// The user name (or certificate subject) of the session; empty when anonymous.
    pub user: &'a str,
    pub now: Now,
}

/// Runs a method: the output arguments (in declaration order) or the call's status.
pub type MethodFn = Arc<dyn Fn(&MethodCall<'_>) -> Result<Vec<Variant>, StatusCode> + Send + Sync>;

/// An application method: its declaration and its handler.
#[derive(Clone)]
pub struct AppMethod {
    pub inputs: Vec<ArgDef>,
    pub outputs: Vec<ArgDef>,
    /// A read-only user may not call it (BadUserAccessDenied).
    pub needs_write: bool,
    pub handler: MethodFn,
}

impl std::fmt::Debug for AppMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppMethod").field("inputs", &self.inputs).field("outputs", &self.outputs).finish()
    }
}

/// The application's hooks of a finished address space, by node.
#[derive(Default)]
pub struct AppHooks {
    /// Write hooks by node index.
    pub(crate) write_hooks: rustc_hash::FxHashMap<u32, WriteHook>,
    /// Methods by method NodeId.
    pub(crate) methods: std::collections::HashMap<NodeId, AppMethod>,
}

impl std::fmt::Debug for AppHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppHooks")
            .field("write_hooks", &self.write_hooks.len())
            .field("methods", &self.methods.len())
            .finish()
    }
}
