// node-opcua-client (npm) against the examples of the `uaring` library crate: the `minimal`
// server and the `plant` server of pushed sensors — browse, read, subscribe with sampling
// interval 0 (every pushed value, in order), a rejecting write hook and a method.
"use strict";
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const {
  OPCUAClient,
  MessageSecurityMode,
  SecurityPolicy,
  AttributeIds,
  DataType,
  StatusCodes,
  ClientSubscription,
  ClientMonitoredItem,
  TimestampsToReturn,
  MonitoringMode,
  BrowseDirection,
} = require("node-opcua-client");
const { startExample, sleep, waitFor } = require("./server");

const PLANT_NS = "urn:uaring:example:plant";
let dir;
let plant;
let client;
let session;
let ns;

function newClient() {
  return OPCUAClient.create({
    applicationName: "uaring-interop-library",
    securityMode: MessageSecurityMode.None,
    securityPolicy: SecurityPolicy.None,
    endpointMustExist: false,
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
  });
}

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "uaring-node-plant-"));
  plant = await startExample("plant", ["--variables", "20", "--rate", "50", "--shards", "2", "--pki", path.join(dir, "pki")]);
  client = newClient();
  await client.connect(plant.url);
  session = await client.createSession();
  const nsArray = (await session.read({ nodeId: "ns=0;i=2255", attributeId: AttributeIds.Value })).value.value;
  ns = nsArray.indexOf(PLANT_NS);
  assert.ok(ns > 1, `namespace ${PLANT_NS} in ${nsArray}`);
});

after(async () => {
  if (session) await session.close();
  if (client) await client.disconnect();
  if (plant) assert.equal(await plant.stop(), 0, "plant must exit 0 on SIGTERM");
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test("the plant folder holds the application's nodes", async () => {
  const r = await session.browse({ nodeId: `ns=${ns};s=Plant`, browseDirection: BrowseDirection.Forward, resultMask: 63 });
  assert.equal(r.statusCode, StatusCodes.Good);
  const names = r.references.map((x) => x.browseName.name);
  for (let i = 0; i < 20; i++) assert.ok(names.includes(`V${i}`), `V${i} in ${names}`);
  for (const n of ["Setpoint", "Pushes", "Reset"]) assert.ok(names.includes(n), `${n} in ${names}`);
  const dv = await session.read({ nodeId: `ns=${ns};s=Plant.V3`, attributeId: AttributeIds.Value });
  assert.equal(dv.statusCode, StatusCodes.Good);
  assert.equal(dv.value.dataType, DataType.Double);
});

test("sampling interval 0 reports every pushed value in order", async () => {
  const sub = ClientSubscription.create(session, {
    requestedPublishingInterval: 500,
    requestedLifetimeCount: 1000,
    requestedMaxKeepAliveCount: 10,
    maxNotificationsPerPublish: 0,
    publishingEnabled: true,
    priority: 1,
  });
  const seen = [];
  const item = await ClientMonitoredItem.create(
    sub,
    { nodeId: `ns=${ns};s=Plant.V7`, attributeId: AttributeIds.Value },
    { samplingInterval: 0, queueSize: 100, discardOldest: true },
    TimestampsToReturn.Both,
    MonitoringMode.Reporting,
  );
  item.on("changed", (dv) => seen.push(dv));
  assert.ok(await waitFor(() => seen.length >= 60, 10000), `${seen.length} notifications`);
  await sub.terminate();
  const ks = seen.slice(1).map((d) => d.value.value);
  for (let i = 1; i < ks.length; i++) assert.equal(ks[i], ks[i - 1] + 1, `a gap after ${ks[i - 1]}: ${ks.slice(0, 20)}`);
  assert.ok(seen.every((d) => (d.statusCode.value & 0x480) === 0), "no overflow");
});

test("the write hook rejects a setpoint out of range; the method answers", async () => {
  const nodeId = `ns=${ns};s=Plant.Setpoint`;
  assert.equal(await session.write({ nodeId, attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Double, value: 12.5 } } }), StatusCodes.Good);
  assert.equal(await session.write({ nodeId, attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Double, value: 1000 } } }), StatusCodes.BadOutOfRange);
  assert.equal((await session.read({ nodeId, attributeId: AttributeIds.Value })).value.value, 12.5);
  const r = await session.call({ objectId: `ns=${ns};s=Plant`, methodId: `ns=${ns};s=Plant.Reset`, inputArguments: [] });
  assert.equal(r.statusCode, StatusCodes.Good);
  assert.equal(r.outputArguments.length, 1);
  assert.equal(r.outputArguments[0].dataType, DataType.UInt64);
});

test("the minimal example serves its variable", async () => {
  const m = await startExample("minimal");
  const c = newClient();
  try {
    await c.connect(m.url);
    const s = await c.createSession();
    const nsArray = (await s.read({ nodeId: "ns=0;i=2255", attributeId: AttributeIds.Value })).value.value;
    const mns = nsArray.indexOf("urn:uaring:example:minimal");
    const dv = await s.read({ nodeId: `ns=${mns};s=Temperature`, attributeId: AttributeIds.Value });
    assert.equal(dv.value.dataType, DataType.Double);
    assert.ok(dv.value.value >= 20 && dv.value.value < 21);
    await s.close();
  } finally {
    await c.disconnect();
    assert.equal(await m.stop(), 0);
  }
});
