// node-opcua-client (npm) against the real uaring binary: SecurityPolicy None, Anonymous.
"use strict";
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const {
  OPCUAClient,
  MessageSecurityMode,
  SecurityPolicy,
  AttributeIds,
  DataType,
  StatusCodes,
  BrowseDirection,
  makeBrowsePath,
  resolveNodeId,
  VariantArrayType,
} = require("node-opcua-client");
const { startServer } = require("./server");

let server;
let client;
let session;

function newClient() {
  return OPCUAClient.create({
    applicationName: "uaring-interop",
    securityMode: MessageSecurityMode.None,
    securityPolicy: SecurityPolicy.None,
    endpointMustExist: false,
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
    requestedSessionTimeout: 60000,
  });
}

before(async () => {
  server = await startServer();
  client = newClient();
  await client.connect(server.url);
  session = await client.createSession();
});

after(async () => {
  if (session) await session.close();
  if (client) await client.disconnect();
  const code = await server.stop();
  assert.equal(code, 0, "uaring must exit 0 on SIGTERM");
});

test("reads ServerStatus, NamespaceArray and OperationLimits", async () => {
  const state = await session.read({ nodeId: "i=2259", attributeId: AttributeIds.Value });
  assert.equal(state.statusCode, StatusCodes.Good);
  assert.equal(state.value.value, 0); // Running
  const status = await session.read({ nodeId: "i=2256", attributeId: AttributeIds.Value });
  assert.equal(status.statusCode, StatusCodes.Good);
  const ns = await session.readNamespaceArray();
  assert.equal(ns[0], "http://opcfoundation.org/UA/");
  const maxRead = await session.read({ nodeId: resolveNodeId("Server_ServerCapabilities_OperationLimits_MaxNodesPerRead"), attributeId: AttributeIds.Value });
  assert.equal(maxRead.statusCode, StatusCodes.Good);
  assert.ok(maxRead.value.value > 0);
});

test("browses Objects with continuation points", async () => {
  const full = await session.browse({ nodeId: "i=85", browseDirection: BrowseDirection.Forward, referenceTypeId: "HierarchicalReferences", includeSubtypes: true, resultMask: 63 });
  assert.equal(full.statusCode, StatusCodes.Good);
  const allNames = full.references.map((r) => r.browseName.name).sort();
  assert.ok(allNames.includes("Server"));
  assert.ok(allNames.includes("Demo"));

  session.requestedMaxReferencesPerNode = 5;
  const first = await session.browse({ nodeId: "i=85", browseDirection: BrowseDirection.Forward, referenceTypeId: "HierarchicalReferences", includeSubtypes: true, resultMask: 63 });
  session.requestedMaxReferencesPerNode = 0;
  // node-opcua follows continuation points itself when requestedMaxReferencesPerNode is set on the
  // session; either way the union must equal the one-shot browse.
  let refs = first.references.slice();
  let cp = first.continuationPoint;
  let pages = 1;
  while (cp && cp.length) {
    const next = await session.browseNext(cp, false);
    assert.equal(next.statusCode, StatusCodes.Good);
    refs = refs.concat(next.references);
    cp = next.continuationPoint;
    pages += 1;
  }
  assert.deepEqual(refs.map((r) => r.browseName.name).sort(), allNames);
});

test("translates /Objects/Server", async () => {
  const r = await session.translateBrowsePath(makeBrowsePath("RootFolder", "/Objects/Server"));
  assert.equal(r.statusCode, StatusCodes.Good);
  assert.equal(r.targets[0].targetId.toString(), "ns=0;i=2253");
  const bad = await session.translateBrowsePath(makeBrowsePath("RootFolder", "/Objects/NoSuchNode"));
  assert.equal(bad.statusCode, StatusCodes.BadNoMatch);
});

const DEMO = [
  ["Boolean", DataType.Boolean, true],
  ["SByte", DataType.SByte, -5],
  ["Byte", DataType.Byte, 250],
  ["Int16", DataType.Int16, -30000],
  ["UInt16", DataType.UInt16, 60000],
  ["Int32", DataType.Int32, -2000000000],
  ["UInt32", DataType.UInt32, 4000000000],
  ["Int64", DataType.Int64, [0xffffffff, 0xfffffff0]],
  ["UInt64", DataType.UInt64, [1, 2]],
  ["Float", DataType.Float, 0.5],
  ["Double", DataType.Double, 2.125],
  ["String", DataType.String, "node-opcua ✓"],
  ["DateTime", DataType.DateTime, new Date(Date.UTC(2026, 10, 29, 1, 2, 3))],
  ["Guid", DataType.Guid, "72962B91-FA75-4AE6-8D28-B404DC7DAF63"],
  ["ByteString", DataType.ByteString, Buffer.from([1, 2, 3, 255])],
  ["NodeId", DataType.NodeId, resolveNodeId("ns=1;s=Some.Node")],
  ["QualifiedName", DataType.QualifiedName, { namespaceIndex: 1, name: "QN" }],
  ["LocalizedText", DataType.LocalizedText, { locale: "de", text: "Hallo" }],
  ["StatusCode", DataType.StatusCode, StatusCodes.BadTimeout],
];

function norm(v) {
  if (v instanceof Date) return v.getTime();
  if (Buffer.isBuffer(v)) return v.toString("hex");
  if (v && typeof v === "object" && typeof v.toString === "function" && v.constructor && v.constructor.name === "NodeId") return v.toString();
  if (v && typeof v === "object" && "name" in v && "namespaceIndex" in v) return `${v.namespaceIndex}:${v.name}`;
  if (v && typeof v === "object" && "text" in v) return `${v.locale}|${v.text}`;
  if (v && typeof v === "object" && "value" in v && "name" in v) return v.value; // StatusCode
  if (typeof v === "string") return v.toUpperCase();
  return JSON.stringify(v);
}

test("reads and writes every Demo.Static type, scalar and array", async () => {
  for (const [name, dataType, value] of DEMO) {
    const nodeId = `ns=1;s=Demo.Static.${name}`;
    const w = await session.write({ nodeId, attributeId: AttributeIds.Value, value: { value: { dataType, arrayType: VariantArrayType.Scalar, value } } });
    assert.equal(w, StatusCodes.Good, `write ${name}: ${w.toString()}`);
    const r = await session.read({ nodeId, attributeId: AttributeIds.Value });
    assert.equal(r.statusCode, StatusCodes.Good, name);
    assert.equal(r.value.dataType, dataType, name);
    assert.equal(norm(r.value.value), norm(value), name);

    const arrId = `ns=1;s=Demo.Static.Arrays.${name}`;
    const wa = await session.write({ nodeId: arrId, attributeId: AttributeIds.Value, value: { value: { dataType, arrayType: VariantArrayType.Array, value: [value, value, value] } } });
    assert.equal(wa, StatusCodes.Good, `write array ${name}: ${wa.toString()}`);
    const ra = await session.read({ nodeId: arrId, attributeId: AttributeIds.Value });
    assert.equal(ra.value.dataType, dataType, name);
    assert.equal(ra.value.value.length, 3, name);
  }
  const w = await session.write({ nodeId: "ns=1;s=Demo.Static.Variant", attributeId: AttributeIds.Value, value: { value: { dataType: DataType.UInt16, value: 7 } } });
  assert.equal(w, StatusCodes.Good);
});

test("answers BadTypeMismatch, BadNotWritable and BadNodeIdUnknown", async () => {
  const mismatch = await session.write({ nodeId: "ns=1;i=1001", attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Double, value: 1.5 } } });
  assert.equal(mismatch, StatusCodes.BadTypeMismatch);
  const ro = await session.write({ nodeId: "ns=1;s=Demo.ReadOnly.Int32", attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Int32, value: 1 } } });
  assert.equal(ro, StatusCodes.BadNotWritable);
  const unknown = await session.read({ nodeId: "ns=1;s=Nope", attributeId: AttributeIds.Value });
  assert.equal(unknown.statusCode, StatusCodes.BadNodeIdUnknown);
});

test("50 concurrent sessions", async () => {
  const clients = [];
  try {
    for (let i = 0; i < 50; i++) clients.push(newClient());
    await Promise.all(clients.map((c) => c.connect(server.url)));
    const sessions = await Promise.all(clients.map((c) => c.createSession()));
    const values = await Promise.all(sessions.map((s, i) => s.read({ nodeId: `ns=1;i=${1001 + i}`, attributeId: AttributeIds.Value })));
    for (const v of values) assert.equal(v.statusCode, StatusCodes.Good);
    await Promise.all(sessions.map((s) => s.close()));
  } finally {
    await Promise.all(clients.map((c) => c.disconnect()));
  }
});
