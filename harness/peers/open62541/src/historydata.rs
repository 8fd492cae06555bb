//! Declarations of open62541's history plug-ins (`plugins/historydata`: the default history
//! database, the default gathering and the in-memory backend) for `open62541-history-server`.
//!
//! open62541-sys 0.6.6 builds open62541 1.5 with `UA_ENABLE_HISTORIZING` on (open62541's
//! default) and links the plug-ins' code into `libopen62541.a`, and its bindings carry the
//! server side (`UA_HistoryDatabase`, `UA_ServerConfig::historyDatabase`); but its bindgen
//! header (`wrapper.h`) does not include `open62541/plugin/historydata/*.h`, so the plug-ins'
//! own types and constructors are not in `open62541_sys`. They are declared here, field for
//! field in the order of those headers (open62541 1.5, `history_data_backend.h`,
//! `history_data_gathering.h`, `history_data_backend_memory.h`,
//! `history_data_gathering_default.h`, `history_database_default.h`): a void pointer and
//! function pointers, with the C types open62541_sys already binds.
//! [`check_memory_backend`] and [`check_gathering`] compare what the constructors return with
//! what those headers document, so a change of layout in a later open62541 fails loudly
//! at start rather than calling the wrong function.

// The C names, as open62541's headers spell them (and open62541_sys's bindings do).
#![allow(non_snake_case, non_camel_case_types)]

use std::ffi::{c_uint, c_void};

use crate::sys::*;

/// `MatchStrategy` (a C enum: `MATCH_EQUAL` = 0 … `MATCH_EQUAL_OR_BEFORE` = 4).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatchStrategy(pub c_uint);

/// `UA_HistorizingUpdateStrategy` (a C enum).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UA_HistorizingUpdateStrategy(pub c_uint);

impl UA_HistorizingUpdateStrategy {
    /// The application stores the values itself.
    pub const USER: Self = Self(0);
    /// A value is stored whenever the node's value is written.
    pub const VALUESET: Self = Self(1);
    /// The node is read periodically (`pollingInterval`).
    pub const POLL: Self = Self(2);
}

/// `struct UA_HistoryDataBackend` (`history_data_backend.h`).
#[repr(C)]
#[derive(Debug)]
pub struct UA_HistoryDataBackend {
    pub context: *mut c_void,
    pub deleteMembers: Option<unsafe extern "C" fn(backend: *mut UA_HistoryDataBackend)>,
    pub serverSetHistoryData: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdbContext: *mut c_void,
            sessionId: *const UA_NodeId,
            sessionContext: *mut c_void,
            nodeId: *const UA_NodeId,
            historizing: UA_Boolean,
            value: *const UA_DataValue,
        ) -> UA_StatusCode,
    >,
    pub getHistoryData: Option<GetHistoryDataFn>,
    pub getDateTimeMatch: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdbContext: *mut c_void,
            sessionId: *const UA_NodeId,
            sessionContext: *mut c_void,
            nodeId: *const UA_NodeId,
            timestamp: UA_DateTime,
            strategy: MatchStrategy,
        ) -> usize,
    >,
    pub getEnd: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdbContext: *mut c_void,
            sessionId: *const UA_NodeId,
            sessionContext: *mut c_void,
            nodeId: *const UA_NodeId,
        ) -> usize,
    >,
    pub lastIndex: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdbContext: *mut c_void,
            sessionId: *const UA_NodeId,
            sessionContext: *mut c_void,
            nodeId: *const UA_NodeId,
        ) -> usize,
    >,
    pub firstIndex: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdbContext: *mut c_void,
            sessionId: *const UA_NodeId,
            sessionContext: *mut c_void,
            nodeId: *const UA_NodeId,
        ) -> usize,
    >,
    pub resultSize: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdbContext: *mut c_void,
            sessionId: *const UA_NodeId,
            sessionContext: *mut c_void,
            nodeId: *const UA_NodeId,
            startIndex: usize,
            endIndex: usize,
        ) -> usize,
    >,
    pub copyDataValues: Option<CopyDataValuesFn>,
    pub getDataValue: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdbContext: *mut c_void,
            sessionId: *const UA_NodeId,
            sessionContext: *mut c_void,
            nodeId: *const UA_NodeId,
            index: usize,
        ) -> *const UA_DataValue,
    >,
    pub boundSupported: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdbContext: *mut c_void,
            sessionId: *const UA_NodeId,
            sessionContext: *mut c_void,
            nodeId: *const UA_NodeId,
        ) -> UA_Boolean,
    >,
    pub timestampsToReturnSupported: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdbContext: *mut c_void,
            sessionId: *const UA_NodeId,
            sessionContext: *mut c_void,
            nodeId: *const UA_NodeId,
            timestampsToReturn: UA_TimestampsToReturn,
        ) -> UA_Boolean,
    >,
    pub insertDataValue: Option<DataValueFn>,
    pub replaceDataValue: Option<DataValueFn>,
    pub updateDataValue: Option<DataValueFn>,
    pub removeDataValue: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdbContext: *mut c_void,
            sessionId: *const UA_NodeId,
            sessionContext: *mut c_void,
            nodeId: *const UA_NodeId,
            startTimestamp: UA_DateTime,
            endTimestamp: UA_DateTime,
        ) -> UA_StatusCode,
    >,
}

/// The signature of the backend's high-level read (`getHistoryData`).
pub type GetHistoryDataFn = unsafe extern "C" fn(
    server: *mut UA_Server,
    sessionId: *const UA_NodeId,
    sessionContext: *mut c_void,
    backend: *const UA_HistoryDataBackend,
    start: UA_DateTime,
    end: UA_DateTime,
    nodeId: *const UA_NodeId,
    maxSizePerResponse: usize,
    numValuesPerNode: UA_UInt32,
    returnBounds: UA_Boolean,
    timestampsToReturn: UA_TimestampsToReturn,
    range: UA_NumericRange,
    releaseContinuationPoints: UA_Boolean,
    continuationPoint: *const UA_ByteString,
    outContinuationPoint: *mut UA_ByteString,
    result: *mut UA_HistoryData,
) -> UA_StatusCode;

/// The signature of the backend's `copyDataValues` (the low-level read's copy).
pub type CopyDataValuesFn = unsafe extern "C" fn(
    server: *mut UA_Server,
    hdbContext: *mut c_void,
    sessionId: *const UA_NodeId,
    sessionContext: *mut c_void,
    nodeId: *const UA_NodeId,
    startIndex: usize,
    endIndex: usize,
    reverse: UA_Boolean,
    valueSize: usize,
    range: UA_NumericRange,
    releaseContinuationPoints: UA_Boolean,
    continuationPoint: *const UA_ByteString,
    outContinuationPoint: *mut UA_ByteString,
    providedValues: *mut usize,
    values: *mut UA_DataValue,
) -> UA_StatusCode;

/// The signature of the backend's insert, replace and update (HistoryUpdate's UpdateData).
pub type DataValueFn = unsafe extern "C" fn(
    server: *mut UA_Server,
    hdbContext: *mut c_void,
    sessionId: *const UA_NodeId,
    sessionContext: *mut c_void,
    nodeId: *const UA_NodeId,
    value: *const UA_DataValue,
) -> UA_StatusCode;

/// `UA_HistorizingNodeIdSettings` (`history_data_gathering.h`).
#[repr(C)]
#[derive(Debug)]
pub struct UA_HistorizingNodeIdSettings {
    pub historizingBackend: UA_HistoryDataBackend,
    /// The most values of one response; more come through continuation points.
    pub maxHistoryDataResponseSize: usize,
    pub historizingUpdateStrategy: UA_HistorizingUpdateStrategy,
    pub pollingInterval: usize,
    pub userContext: *mut c_void,
}

/// `struct UA_HistoryDataGathering` (`history_data_gathering.h`).
#[repr(C)]
#[derive(Debug)]
pub struct UA_HistoryDataGathering {
    pub context: *mut c_void,
    pub deleteMembers: Option<unsafe extern "C" fn(gathering: *mut UA_HistoryDataGathering)>,
    pub registerNodeId: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdgContext: *mut c_void,
            nodeId: *const UA_NodeId,
            setting: UA_HistorizingNodeIdSettings,
        ) -> UA_StatusCode,
    >,
    pub stopPoll: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdgContext: *mut c_void,
            nodeId: *const UA_NodeId,
        ) -> UA_StatusCode,
    >,
    pub startPoll: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdgContext: *mut c_void,
            nodeId: *const UA_NodeId,
        ) -> UA_StatusCode,
    >,
    pub updateNodeIdSetting: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdgContext: *mut c_void,
            nodeId: *const UA_NodeId,
            setting: UA_HistorizingNodeIdSettings,
        ) -> UA_Boolean,
    >,
    pub getHistorizingSetting: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdgContext: *mut c_void,
            nodeId: *const UA_NodeId,
        ) -> *const UA_HistorizingNodeIdSettings,
    >,
    pub setValue: Option<
        unsafe extern "C" fn(
            server: *mut UA_Server,
            hdgContext: *mut c_void,
            sessionId: *const UA_NodeId,
            sessionContext: *mut c_void,
            nodeId: *const UA_NodeId,
            historizing: UA_Boolean,
            value: *const UA_DataValue,
        ),
    >,
}

// Pointer-sized fields only (the enum between two size_t takes one with its padding on 64-bit
// targets, and is one on 32-bit ones): the sizes C gives these structures.
const WORD: usize = std::mem::size_of::<usize>();
const _: () = assert!(std::mem::size_of::<UA_HistoryDataBackend>() == 17 * WORD);
const _: () = assert!(std::mem::size_of::<UA_HistorizingNodeIdSettings>() == 21 * WORD);
const _: () = assert!(std::mem::size_of::<UA_HistoryDataGathering>() == 8 * WORD);

unsafe extern "C" {
    /// The in-memory backend (`history_data_backend_memory.h`): a sorted array of copied
    /// DataValues per node, grown by doubling from `initialDataStoreSize`.
    pub fn UA_HistoryDataBackend_Memory(
        initialNodeIdStoreSize: usize,
        initialDataStoreSize: usize,
    ) -> UA_HistoryDataBackend;
    /// Frees the memory backend's store (after the server that used it is deleted).
    pub fn UA_HistoryDataBackend_Memory_clear(backend: *mut UA_HistoryDataBackend);
    /// The default gathering (`history_data_gathering_default.h`): the registry of
    /// historized nodes and their settings.
    pub fn UA_HistoryDataGathering_Default(
        initialNodeIdStoreSize: usize,
    ) -> UA_HistoryDataGathering;
    /// The default history database (`history_database_default.h`) on `gathering`: readRaw,
    /// setValue, updateData and deleteRawModified; no readModified, readProcessed, readAtTime
    /// or readEvent (the server answers those `BadNotSupported`).
    pub fn UA_HistoryDatabase_default(gathering: UA_HistoryDataGathering) -> UA_HistoryDatabase;
}

/// Checks that `b`, as [`UA_HistoryDataBackend_Memory`] returned it, is what
/// `history_data_backend_memory.c` of open62541 1.5 builds: a context, the low-level read API,
/// the update functions, and no high-level `getHistoryData`.
pub fn check_memory_backend(b: &UA_HistoryDataBackend) -> Result<(), String> {
    let low_level = [
        ("context", !b.context.is_null()),
        ("deleteMembers", b.deleteMembers.is_some()),
        ("serverSetHistoryData", b.serverSetHistoryData.is_some()),
        ("getDateTimeMatch", b.getDateTimeMatch.is_some()),
        ("getEnd", b.getEnd.is_some()),
        ("lastIndex", b.lastIndex.is_some()),
        ("firstIndex", b.firstIndex.is_some()),
        ("resultSize", b.resultSize.is_some()),
        ("copyDataValues", b.copyDataValues.is_some()),
        ("getDataValue", b.getDataValue.is_some()),
        ("boundSupported", b.boundSupported.is_some()),
        (
            "timestampsToReturnSupported",
            b.timestampsToReturnSupported.is_some(),
        ),
        ("insertDataValue", b.insertDataValue.is_some()),
        ("replaceDataValue", b.replaceDataValue.is_some()),
        ("updateDataValue", b.updateDataValue.is_some()),
        ("removeDataValue", b.removeDataValue.is_some()),
    ];
    if let Some((name, _)) = low_level.iter().find(|(_, set)| !set) {
        return Err(format!(
            "UA_HistoryDataBackend_Memory: {name} is not set (out of memory, or the structure's layout is not open62541 1.5's)"
        ));
    }
    if b.getHistoryData.is_some() {
        return Err("UA_HistoryDataBackend_Memory: getHistoryData is set (the structure's layout is not open62541 1.5's)".into());
    }
    Ok(())
}

/// Checks that `g`, as [`UA_HistoryDataGathering_Default`] returned it, has its context and
/// every function.
pub fn check_gathering(g: &UA_HistoryDataGathering) -> Result<(), String> {
    let all = [
        ("context", !g.context.is_null()),
        ("deleteMembers", g.deleteMembers.is_some()),
        ("registerNodeId", g.registerNodeId.is_some()),
        ("stopPoll", g.stopPoll.is_some()),
        ("startPoll", g.startPoll.is_some()),
        ("updateNodeIdSetting", g.updateNodeIdSetting.is_some()),
        ("getHistorizingSetting", g.getHistorizingSetting.is_some()),
        ("setValue", g.setValue.is_some()),
    ];
    match all.iter().find(|(_, set)| !set) {
        Some((name, _)) => Err(format!(
            "UA_HistoryDataGathering_Default: {name} is not set (out of memory, or the structure's layout is not open62541 1.5's)"
        )),
        None => Ok(()),
    }
}
