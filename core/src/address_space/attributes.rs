//! One attribute of one node, read or written: the rules every path that touches attributes
//! shares — the Read and Write services ([`crate::services::attribute`], which add what a
//! user's roles narrow), their deferred completions ([`crate::server::deferred`]), and the
//! sampling of monitored items ([`crate::subscription`]). What a Read or Write request is
//! (its limits, its response, answering later) stays with the service.

use crate::address_space::numeric_range::NumericRange;
use crate::address_space::{
    access_level, ids, AddressSpace, AttrsView, NodeView, SourceView, VariableView,
};
use crate::config::OperationLimits;
use crate::generated::types::{PermissionType, WriteValue};
use crate::roles::Roles;
use crate::types::{BuiltinType, DataValue, NodeId, QualifiedName, StatusCode, Variant};
use crate::Now;

/// The permission an operation on `attribute_id` needs to read it (also what a monitored
/// item of the attribute needs).
pub fn read_permission(attribute_id: u32) -> PermissionType {
    match attribute_id {
        attr::VALUE => PermissionType::Read,
        attr::ROLE_PERMISSIONS => PermissionType::ReadRolePermissions,
        _ => PermissionType::Browse,
    }
}

/// WriteMask bits (Part 3 §8.60) the permissions treat apart.
pub(crate) mod write_mask {
    pub const HISTORIZING: u32 = 1 << 9;
    pub const ROLE_PERMISSIONS: u32 = 1 << 23;
}

/// The AccessLevel bits a user with `permissions` keeps (ANDed into UserAccessLevel).
pub fn user_access_mask(permissions: PermissionType) -> u8 {
    let mut m = 0xFF;
    if !permissions.contains(PermissionType::Read) {
        m &= !access_level::CURRENT_READ;
    }
    if !permissions.contains(PermissionType::Write) {
        m &= !(access_level::CURRENT_WRITE
            | access_level::STATUS_WRITE
            | access_level::TIMESTAMP_WRITE);
    }
    if !permissions.contains(PermissionType::ReadHistory) {
        m &= !access_level::HISTORY_READ;
    }
    let history_write = PermissionType::InsertHistory.0
        | PermissionType::ModifyHistory.0
        | PermissionType::DeleteHistory.0;
    if permissions.0 & history_write == 0 {
        m &= !access_level::HISTORY_WRITE;
    }
    m
}

/// May a user with `roles` write this attribute of this node? Value writes need Write,
/// RolePermissions WriteRolePermissions, Historizing WriteHistorizing, any other attribute
/// WriteAttribute (BadUserAccessDenied). An unknown node is BadNodeIdUnknown.
pub fn write_permitted(
    space: &AddressSpace,
    roles: Roles,
    w: &WriteValue,
) -> Result<(), StatusCode> {
    if roles.may_write() && !space.has_role_permissions_in(w.node_id.namespace) {
        return Ok(());
    }
    let index = space
        .node_index(&w.node_id)
        .ok_or(StatusCode::BadNodeIdUnknown)?;
    let needed = match w.attribute_id {
        attr::VALUE => PermissionType::Write,
        attr::ROLE_PERMISSIONS => PermissionType::WriteRolePermissions,
        attr::HISTORIZING => PermissionType::WriteHistorizing,
        _ => PermissionType::WriteAttribute,
    };
    if space.permissions(index, roles).contains(needed) {
        Ok(())
    } else {
        Err(StatusCode::BadUserAccessDenied)
    }
}

/// Attribute ids (Part 6 AttributeIds.csv).
pub mod attr {
    pub const NODE_ID: u32 = 1;
    pub const NODE_CLASS: u32 = 2;
    pub const BROWSE_NAME: u32 = 3;
    pub const DISPLAY_NAME: u32 = 4;
    pub const DESCRIPTION: u32 = 5;
    pub const WRITE_MASK: u32 = 6;
    pub const USER_WRITE_MASK: u32 = 7;
    pub const IS_ABSTRACT: u32 = 8;
    pub const SYMMETRIC: u32 = 9;
    pub const INVERSE_NAME: u32 = 10;
    pub const CONTAINS_NO_LOOPS: u32 = 11;
    pub const EVENT_NOTIFIER: u32 = 12;
    pub const VALUE: u32 = 13;
    pub const DATA_TYPE: u32 = 14;
    pub const VALUE_RANK: u32 = 15;
    pub const ARRAY_DIMENSIONS: u32 = 16;
    pub const ACCESS_LEVEL: u32 = 17;
    pub const USER_ACCESS_LEVEL: u32 = 18;
    pub const MINIMUM_SAMPLING_INTERVAL: u32 = 19;
    pub const HISTORIZING: u32 = 20;
    pub const EXECUTABLE: u32 = 21;
    pub const USER_EXECUTABLE: u32 = 22;
    pub const DATA_TYPE_DEFINITION: u32 = 23;
    pub const ROLE_PERMISSIONS: u32 = 24;
    pub const USER_ROLE_PERMISSIONS: u32 = 25;
    pub const ACCESS_RESTRICTIONS: u32 = 26;
    pub const ACCESS_LEVEL_EX: u32 = 27;
}

/// Which timestamps a Read returns (TimestampsToReturn, Part 4 §7.40).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timestamps {
    Source,
    Server,
    Both,
    Neither,
}

impl Timestamps {
    /// From the enumeration's wire value; `None` for Invalid (4) and unknown values.
    pub fn from_i32(v: i32) -> Option<Timestamps> {
        Some(match v {
            0 => Timestamps::Source,
            1 => Timestamps::Server,
            2 => Timestamps::Both,
            3 => Timestamps::Neither,
            _ => return None,
        })
    }
    pub fn source(self) -> bool {
        matches!(self, Timestamps::Source | Timestamps::Both)
    }
    pub fn server(self) -> bool {
        matches!(self, Timestamps::Server | Timestamps::Both)
    }
}

pub(crate) fn bad(s: StatusCode) -> DataValue {
    DataValue::status(s)
}

fn var(v: impl Into<Variant>) -> Result<Variant, StatusCode> {
    Ok(v.into())
}

fn u32_array(v: &[u32]) -> Variant {
    if v.is_empty() {
        // A null array: no dimensions are known.
        return Variant::Empty;
    }
    Variant::array(
        BuiltinType::UInt32,
        v.iter().map(|&x| Variant::UInt32(x)).collect(),
    )
    .unwrap_or(Variant::Empty)
}

/// The value of a non-Value attribute, or `BadAttributeIdInvalid` when the node's class
/// lacks it.
fn attribute_value(node: NodeView<'_>, attribute_id: u32) -> Result<Variant, StatusCode> {
    use AttrsView as C;
    let invalid = Err(StatusCode::BadAttributeIdInvalid);
    match attribute_id {
        attr::NODE_ID => var(node.node_id()),
        attr::NODE_CLASS => var(node.node_class().0),
        attr::BROWSE_NAME => var(node.browse_name()),
        attr::DISPLAY_NAME => var(node.display_name()),
        attr::DESCRIPTION => var(node.description()),
        attr::WRITE_MASK => var(node.write_mask()),
        attr::USER_WRITE_MASK => var(node.user_write_mask()),
        attr::IS_ABSTRACT => node
            .is_abstract()
            .map(Variant::Boolean)
            .ok_or(StatusCode::BadAttributeIdInvalid),
        attr::SYMMETRIC => match node.attributes() {
            C::ReferenceType { symmetric, .. } => var(symmetric),
            _ => invalid,
        },
        attr::INVERSE_NAME => match node.attributes() {
            C::ReferenceType { inverse_name, .. } => var(inverse_name.cloned().unwrap_or_default()),
            _ => invalid,
        },
        attr::CONTAINS_NO_LOOPS => match node.attributes() {
            C::View {
                contains_no_loops, ..
            } => var(contains_no_loops),
            _ => invalid,
        },
        attr::EVENT_NOTIFIER => node
            .event_notifier()
            .map(Variant::Byte)
            .ok_or(StatusCode::BadAttributeIdInvalid),
        attr::DATA_TYPE => match node.attributes() {
            C::Variable(v) => var(v.data_type().clone()),
            C::VariableType(v) => var(v.data_type.clone()),
            _ => invalid,
        },
        attr::VALUE_RANK => match node.attributes() {
            C::Variable(v) => var(v.value_rank()),
            C::VariableType(v) => var(v.value_rank),
            _ => invalid,
        },
        attr::ARRAY_DIMENSIONS => match node.attributes() {
            C::Variable(v) => Ok(u32_array(v.array_dimensions())),
            C::VariableType(v) => Ok(u32_array(&v.array_dimensions)),
            _ => invalid,
        },
        attr::ACCESS_LEVEL => node
            .as_variable()
            .map(|v| Variant::Byte(v.access_level()))
            .ok_or(StatusCode::BadAttributeIdInvalid),
        attr::USER_ACCESS_LEVEL => node
            .as_variable()
            .map(|v| Variant::Byte(v.user_access_level()))
            .ok_or(StatusCode::BadAttributeIdInvalid),
        attr::ACCESS_LEVEL_EX => node
            .as_variable()
            .map(|v| Variant::UInt32(v.access_level_ex().unwrap_or(v.access_level() as u32)))
            .ok_or(StatusCode::BadAttributeIdInvalid),
        attr::MINIMUM_SAMPLING_INTERVAL => node
            .as_variable()
            .map(|v| Variant::Double(v.minimum_sampling_interval()))
            .ok_or(StatusCode::BadAttributeIdInvalid),
        attr::HISTORIZING => node
            .as_variable()
            .map(|v| Variant::Boolean(v.historizing()))
            .ok_or(StatusCode::BadAttributeIdInvalid),
        attr::EXECUTABLE => match node.attributes() {
            C::Method { executable, .. } => var(executable),
            _ => invalid,
        },
        attr::USER_EXECUTABLE => match node.attributes() {
            C::Method {
                user_executable, ..
            } => var(user_executable),
            _ => invalid,
        },
        attr::DATA_TYPE_DEFINITION => match node.attributes() {
            // Abstract and simple DataTypes have no definition: reading it is not an error
            // for the class but there is nothing to return.
            C::DataType {
                data_type_definition: Some(d),
                ..
            } => var(d.clone()),
            C::DataType { .. } => Err(StatusCode::BadAttributeIdInvalid),
            _ => invalid,
        },
        // Optional attributes this server does not provide.
        attr::ROLE_PERMISSIONS | attr::USER_ROLE_PERMISSIONS | attr::ACCESS_RESTRICTIONS => invalid,
        _ => invalid,
    }
}

/// Is `v` (a scalar or array value) a structure, as DataEncoding requires?
fn is_structure(v: &Variant) -> bool {
    match v {
        Variant::ExtensionObject(_) => true,
        Variant::Array(a) => a.value_type == BuiltinType::ExtensionObject,
        _ => false,
    }
}

/// Checks a ReadValueId's DataEncoding for the given attribute and value.
pub(crate) fn check_encoding(
    attribute_id: u32,
    encoding: &QualifiedName,
    value: Option<&Variant>,
) -> Result<(), StatusCode> {
    if encoding.is_null() {
        return Ok(());
    }
    if attribute_id != attr::VALUE {
        return Err(StatusCode::BadDataEncodingInvalid);
    }
    if let Some(v) = value {
        if !is_structure(v) {
            return Err(StatusCode::BadDataEncodingInvalid);
        }
    }
    match (encoding.namespace_index, encoding.name.as_str()) {
        (0, "Default Binary") => Ok(()),
        (0, "Default XML") | (0, "Default JSON") => Err(StatusCode::BadDataEncodingUnsupported),
        _ => Err(StatusCode::BadDataEncodingUnsupported),
    }
}

/// May the Value of Variable `v` be read (AccessLevel, then UserAccessLevel)? One rule for
/// values answered at once and for those deferred to the application.
pub(crate) fn value_readable(v: VariableView<'_>) -> Result<(), StatusCode> {
    if v.access_level() & access_level::CURRENT_READ == 0 {
        Err(StatusCode::BadNotReadable)
    } else if v.user_access_level() & access_level::CURRENT_READ == 0 {
        Err(StatusCode::BadUserAccessDenied)
    } else {
        Ok(())
    }
}

/// [`read_attribute`] into `out`. The Value of a stored Variable (a value cell) is copied
/// from the cell's current value into `out` with `clone_from`, without a clone of its own,
/// and a one-dimension IndexRange copies only the selected elements: a String, ByteString,
/// array or structure read into a slot that held a value of its kind (a recycled Read
/// response) allocates nothing. Everything else is [`read_attribute`]'s answer, moved in.
pub fn read_attribute_into(
    space: &AddressSpace,
    node_id: &NodeId,
    attribute_id: u32,
    index_range: &str,
    data_encoding: &QualifiedName,
    ts: Timestamps,
    now: Now,
    out: &mut DataValue,
) {
    if attribute_id == attr::VALUE {
        // A Variable not readable answers its status from `read_attribute` below.
        let cell = space.node(node_id).and_then(|n| n.readable_cell());
        let range = NumericRange::single(index_range);
        if let (Some(cell), true) = (cell, index_range.is_empty() || range.is_some()) {
            let r = cell.with(|dv| -> Result<(), StatusCode> {
                check_encoding(attr::VALUE, data_encoding, Some(&dv.value))?;
                match range {
                    None => out.clone_from(dv),
                    Some((lo, hi)) => {
                        NumericRange::read_single_into(lo, hi, &dv.value, &mut out.value)?;
                        out.status = dv.status;
                        out.source_timestamp = dv.source_timestamp;
                        out.source_picoseconds = dv.source_picoseconds;
                        out.server_timestamp = dv.server_timestamp;
                        out.server_picoseconds = dv.server_picoseconds;
                    }
                }
                Ok(())
            });
            match r {
                Ok(()) => apply_timestamps(out, ts, now),
                Err(e) => *out = bad(e),
            }
            return;
        }
    }
    *out = read_attribute(
        space,
        node_id,
        attribute_id,
        index_range,
        data_encoding,
        ts,
        now,
    );
}

/// Reads one attribute of one node (one ReadValueId).
pub fn read_attribute(
    space: &AddressSpace,
    node_id: &NodeId,
    attribute_id: u32,
    index_range: &str,
    data_encoding: &QualifiedName,
    ts: Timestamps,
    now: Now,
) -> DataValue {
    let Some(node) = space.node(node_id) else {
        return bad(StatusCode::BadNodeIdUnknown);
    };
    let range = match NumericRange::parse(index_range) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let server_ts = ts.server().then_some(now.utc);

    if attribute_id != attr::VALUE {
        let v = match attribute_value(node, attribute_id) {
            Ok(v) => v,
            Err(e) => return bad(e),
        };
        if let Err(e) = check_encoding(attribute_id, data_encoding, None) {
            return bad(e);
        }
        let v = match &range {
            None => v,
            Some(r) => match r.read(&v) {
                Ok(v) => v,
                Err(e) => return bad(e),
            },
        };
        return DataValue {
            value: v,
            server_timestamp: server_ts,
            ..Default::default()
        };
    }

    let dv = match node.attributes() {
        AttrsView::Variable(v) => {
            if let Err(status) = value_readable(v) {
                return bad(status);
            }
            match v.source() {
                SourceView::Cell(c) => c.load(),
                SourceView::Dynamic(d) => space.dynamic_value(d, now),
                SourceView::Computed(c) => c.value(now),
                // Answered later: the Read service defers it; other callers (a new monitored
                // item's first value) get this until the source answers.
                SourceView::Async(_) => return bad(StatusCode::BadWaitingForInitialData),
            }
        }
        AttrsView::VariableType(v) => DataValue::new(v.value.clone()),
        _ => return bad(StatusCode::BadAttributeIdInvalid),
    };
    finish_value(dv, data_encoding, range.as_ref(), ts, now)
}

/// The last steps of reading a Value: the DataEncoding check, the IndexRange and the
/// timestamps asked for (the server timestamp is `now` unless the value has one).
fn finish_value(
    mut dv: DataValue,
    data_encoding: &QualifiedName,
    range: Option<&NumericRange>,
    ts: Timestamps,
    now: Now,
) -> DataValue {
    if let Err(e) = check_encoding(attr::VALUE, data_encoding, Some(&dv.value)) {
        return bad(e);
    }
    if let Some(r) = range {
        match r.read(&dv.value) {
            Ok(v) => dv.value = v,
            Err(e) => return bad(e),
        }
    }
    apply_timestamps(&mut dv, ts, now);
    dv
}

/// The timestamps asked for: the source's kept or dropped, the server's `now` unless the
/// value has one.
fn apply_timestamps(dv: &mut DataValue, ts: Timestamps, now: Now) {
    if !ts.source() {
        dv.source_timestamp = None;
        dv.source_picoseconds = None;
    }
    if ts.server() {
        if dv.server_timestamp.is_none() {
            dv.server_timestamp = Some(now.utc);
        }
    } else {
        dv.server_timestamp = None;
        dv.server_picoseconds = None;
    }
}

/// The built-in type a DataType is encoded as (its nearest built-in supertype, or itself).
fn builtin_of(space: &AddressSpace, dt: &NodeId) -> Option<u32> {
    let mut cur = dt.clone();
    for _ in 0..64 {
        if let Some(n) = cur.as_ns0() {
            if (1..=25).contains(&n) {
                return Some(n);
            }
        }
        cur = space.supertype_of(&cur)?;
    }
    None
}

/// May a scalar of built-in type `t` be stored in a variable of DataType `dt`?
fn builtin_fits(space: &AddressSpace, t: BuiltinType, dt: &NodeId) -> bool {
    let tid = NodeId::ns0(t as u32);
    if &tid == dt || space.is_subtype_of(&tid, dt) {
        return true; // Int32 into Int32 / Integer / Number / BaseDataType
    }
    // A subtype of a built-in type travels as that built-in type (Duration as Double,
    // UtcTime as DateTime, …); an Enumeration travels as Int32.
    if builtin_of(space, dt) == Some(t as u32) {
        return true;
    }
    t == BuiltinType::Int32 && space.is_subtype_of(dt, &NodeId::ns0(ids::ENUMERATION))
}

/// Does one scalar value fit DataType `dt`?
fn scalar_fits(space: &AddressSpace, v: &Variant, dt: &NodeId) -> bool {
    match v {
        Variant::Empty | Variant::Array(_) => false,
        Variant::ExtensionObject(eo) => {
            // The structure's DataType, found through its encoding id.
            match space.data_type_of_encoding(&eo.type_id) {
                Some(sdt) => space.is_subtype_of(sdt, dt),
                None => false,
            }
        }
        v => match v.scalar_type() {
            Some(t) => builtin_fits(space, t, dt),
            None => false,
        },
    }
}

/// Does `v`'s type (ignoring rank) fit DataType `dt`?
fn type_fits(space: &AddressSpace, v: &Variant, dt: &NodeId) -> bool {
    match v {
        Variant::Array(a) => {
            if a.value_type == BuiltinType::Variant {
                // An array of Variant only fits BaseDataType, and each element must be a scalar.
                dt.as_ns0() == Some(ids::BASE_DATA_TYPE)
                    && a.values.iter().all(|e| !e.is_array() && !e.is_empty())
            } else if a.value_type == BuiltinType::ExtensionObject {
                a.values.iter().all(|e| scalar_fits(space, e, dt))
            } else {
                builtin_fits(space, a.value_type, dt)
            }
        }
        v => scalar_fits(space, v, dt),
    }
}

/// Does `v`'s rank and shape fit the variable's ValueRank and ArrayDimensions?
fn rank_fits(var: VariableView<'_>, v: &Variant) -> bool {
    rank_fits_shape(var.value_rank(), var.array_dimensions(), v)
}

fn rank_fits_shape(value_rank: i32, array_dimensions: &[u32], v: &Variant) -> bool {
    let vr = v.value_rank();
    let ok = match value_rank {
        -3 => vr == -1 || vr == 1,
        -2 => true,
        -1 => vr == -1,
        0 => vr >= 1,
        n if n > 0 => vr == n,
        _ => false,
    };
    if !ok {
        return false;
    }
    // Fixed dimension lengths (0 = any) bound the written shape.
    if let Variant::Array(a) = v {
        if value_rank > 0 && array_dimensions.len() == value_rank as usize {
            let shape: Vec<usize> = match &a.dimensions {
                Some(d) => d.iter().map(|&x| x.max(0) as usize).collect(),
                None => vec![a.values.len()],
            };
            return shape
                .iter()
                .zip(array_dimensions)
                .all(|(&len, &max)| max == 0 || len <= max as usize);
        }
    }
    true
}

/// Writes one attribute of one node (one WriteValue) for a session of user `user` (empty:
/// anonymous) with `roles` (told to a write hook; the access check is the caller's,
/// [`write_permitted`]). Returns the operation's StatusCode.
pub fn write_attribute(
    space: &AddressSpace,
    limits: &OperationLimits,
    node_id: &NodeId,
    attribute_id: u32,
    index_range: &str,
    value: &DataValue,
    user: &str,
    roles: crate::roles::Roles,
    now: Now,
) -> StatusCode {
    let p = match prepare_write(
        space,
        limits,
        node_id,
        attribute_id,
        index_range,
        value,
        now,
    ) {
        Ok(p) => p,
        Err(s) => return s,
    };
    if let Some(hook) = space.write_hook(p.node_index) {
        // The application accepts or rejects the value before it is stored; a Variable
        // without a stored value (a device behind a read callback) is written by the hook.
        let info = crate::address_space::app::WriteInfo {
            node_id,
            value: &p.stored,
            index_range,
            user,
            roles,
            now,
        };
        if let Err(status) = hook(&info) {
            return if status.is_bad() {
                status
            } else {
                StatusCode::BadInternalError
            };
        }
    }
    commit_write(space, &p)
}

/// A Write operation that passed every check and waits only for the application (a write
/// hook) before [`commit_write`] stores it.
#[derive(Debug)]
pub struct PreparedWrite {
    pub node_index: u32,
    /// The value as it will be stored (whole; for an IndexRange write, the written part).
    pub stored: DataValue,
    pub range: Option<NumericRange>,
    /// The Variable stores values (else only its hook takes the write).
    pub stores: bool,
}

/// The checks of a Write of one attribute: access, timestamps, type, rank, size. A Variable
/// with no stored value is writable only through a write hook (sync or async).
pub fn prepare_write(
    space: &AddressSpace,
    limits: &OperationLimits,
    node_id: &NodeId,
    attribute_id: u32,
    index_range: &str,
    value: &DataValue,
    now: Now,
) -> Result<PreparedWrite, StatusCode> {
    let node_index = space
        .node_index(node_id)
        .ok_or(StatusCode::BadNodeIdUnknown)?;
    let node = space
        .node_at(node_index)
        .ok_or(StatusCode::BadNodeIdUnknown)?;
    if attribute_id != attr::VALUE {
        // The attribute must exist on the node for BadNotWritable; else it's invalid.
        return Err(match attribute_value(node, attribute_id) {
            Ok(_) => StatusCode::BadNotWritable,
            Err(e) => e,
        });
    }
    let var = match node.as_variable() {
        Some(v) => v,
        None if node.node_class() == crate::address_space::NodeClass::VariableType => {
            return Err(StatusCode::BadNotWritable)
        }
        None => return Err(StatusCode::BadAttributeIdInvalid),
    };
    if var.access_level() & access_level::CURRENT_WRITE == 0 {
        return Err(StatusCode::BadNotWritable);
    }
    if var.user_access_level() & access_level::CURRENT_WRITE == 0 {
        return Err(StatusCode::BadUserAccessDenied);
    }
    let stores = var.cell().is_some();
    if !stores
        && space.write_hook(node_index).is_none()
        && space.async_write_hook(node_index).is_none()
    {
        return Err(StatusCode::BadNotWritable);
    }
    let range = NumericRange::parse(index_range)?;
    if value.server_timestamp.is_some() || value.server_picoseconds.is_some() {
        return Err(StatusCode::BadWriteNotSupported);
    }
    if value.status.is_some_and(|s| s.0 != 0)
        && var.access_level() & access_level::STATUS_WRITE == 0
    {
        return Err(StatusCode::BadWriteNotSupported);
    }
    if value.source_timestamp.is_some() && var.access_level() & access_level::TIMESTAMP_WRITE == 0 {
        return Err(StatusCode::BadWriteNotSupported);
    }
    if value.value.is_empty() {
        return Err(StatusCode::BadTypeMismatch);
    }
    check_size(limits, &value.value)?;
    if !type_fits(space, &value.value, var.data_type()) {
        return Err(StatusCode::BadTypeMismatch);
    }
    if range.is_none() && !rank_fits(var, &value.value) {
        return Err(StatusCode::BadTypeMismatch);
    }
    let stored = DataValue {
        value: value.value.clone(),
        status: value.status.filter(|s| s.0 != 0),
        source_timestamp: Some(value.source_timestamp.unwrap_or(now.utc)),
        source_picoseconds: value.source_timestamp.and(value.source_picoseconds),
        server_timestamp: None,
        server_picoseconds: None,
    };
    Ok(PreparedWrite {
        node_index,
        stored,
        range,
        stores,
    })
}

/// Stores a prepared Write (nothing for a Variable without a stored value: its hook took it).
pub fn commit_write(space: &AddressSpace, p: &PreparedWrite) -> StatusCode {
    if !p.stores {
        return StatusCode::Good;
    }
    let result = match &p.range {
        None => space.store_value(p.node_index, p.stored.clone()),
        Some(r) => space.update_value(p.node_index, |cur| {
            r.write(&cur.value, &p.stored.value).map(|v| DataValue {
                value: v,
                ..p.stored.clone()
            })
        }),
    };
    match result {
        Ok(_) => StatusCode::Good,
        Err(e) => e,
    }
}

/// Finishes a value read asynchronously as [`read_attribute`] finishes a stored one: the
/// DataEncoding check, the IndexRange and the timestamps asked for.
pub fn finish_async_value(
    dv: DataValue,
    data_encoding: &QualifiedName,
    range: Option<&NumericRange>,
    ts: Timestamps,
    now: Now,
) -> DataValue {
    if dv.status.is_some_and(|s| s.is_bad()) {
        let mut b = bad(dv.status.unwrap_or(StatusCode::BadInternalError));
        if ts.server() {
            b.server_timestamp = Some(now.utc);
        }
        return b;
    }
    finish_value(dv, data_encoding, range, ts, now)
}

/// [`check_value`] for a Variable being defined (AddNodes), before it is stored.
pub fn check_value_of(
    space: &AddressSpace,
    var: &super::VariableAttributes,
    v: &Variant,
) -> Result<(), StatusCode> {
    if v.is_empty()
        || !type_fits(space, v, &var.data_type)
        || !rank_fits_shape(var.value_rank, &var.array_dimensions, v)
    {
        return Err(StatusCode::BadTypeMismatch);
    }
    Ok(())
}

/// Does `v` fit the Variable `node` as its Value (not empty; its type fits the DataType,
/// its rank and shape the ValueRank and ArrayDimensions)? The checks of a Write, without
/// the access rights and size limits (for values pushed by the application).
pub fn check_value(
    space: &AddressSpace,
    node: NodeView<'_>,
    v: &Variant,
) -> Result<(), StatusCode> {
    let Some(var) = node.as_variable() else {
        return Err(StatusCode::BadAttributeIdInvalid);
    };
    if v.is_empty() || !type_fits(space, v, var.data_type()) || !rank_fits(var, v) {
        return Err(StatusCode::BadTypeMismatch);
    }
    Ok(())
}

/// Rejects values beyond the configured array/string lengths.
fn check_size(limits: &OperationLimits, v: &Variant) -> Result<(), StatusCode> {
    let too_long = match v {
        Variant::Array(a) => a.values.len() > limits.max_array_length as usize,
        Variant::String(s) => s.as_str().len() > limits.max_string_length as usize,
        Variant::ByteString(b) => b.as_bytes().len() > limits.max_byte_string_length as usize,
        _ => false,
    };
    if too_long {
        return Err(StatusCode::BadOutOfRange);
    }
    if let Variant::Array(a) = v {
        for e in &a.values {
            check_size(limits, e)?;
        }
    }
    Ok(())
}
