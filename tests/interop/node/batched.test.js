// node-opcua-client (npm) against the real uaring binary with batched waiting on
// (`[runtime] batch_wait_us = 50`, docs/Configuration.md): two shards (CPUs 0-1 where the
// machine has them), round-robin distribution, so the second session lands on the other shard.
// One Write and one Read of several values, browse, pipelined Reads, and a subscription
// (50 ms publishing interval) that receives every value the other session writes, in order.
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
  ClientSubscription,
  ClientMonitoredItem,
  TimestampsToReturn,
} = require("node-opcua-client");
const { startServer, cpusArgs, batchedConfig, sleep, waitFor } = require("./server");

const DEMO = "ns=1;s=Demo.Static.";

let server;
const clients = [];
const sessions = [];

async function openSession() {
  const client = OPCUAClient.create({
    applicationName: "uaring-interop-batched",
    securityMode: MessageSecurityMode.None,
    securityPolicy: SecurityPolicy.None,
    endpointMustExist: false,
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
    requestedSessionTimeout: 60000,
  });
  await client.connect(server.url);
  const session = await client.createSession();
  clients.push(client);
  sessions.push(session);
  return session;
}

before(async () => {
  server = await startServer([...cpusArgs(), "--distribution", "round-robin", "--config", batchedConfig]);
  // Round-robin: the subscriber and the writer are on different shards.
  await openSession();
  await openSession();
});

after(async () => {
  for (const s of sessions) await s.close();
  for (const c of clients) await c.disconnect();
  const code = await server.stop();
  assert.equal(code, 0, "uaring must exit 0 on SIGTERM");
});

test("one Write and one Read of several values, with a status for an unknown node", async () => {
  const [session] = sessions;
  const values = [
    ["Int32", DataType.Int32, -31337],
    ["Double", DataType.Double, 2.75],
    ["String", DataType.String, "batched node"],
    ["Boolean", DataType.Boolean, false],
    ["UInt16", DataType.UInt16, 4242],
  ];
  const nodes = [...values.map(([n]) => DEMO + n), "ns=1;s=Does.Not.Exist"];
  const writes = [...values, [null, DataType.Int32, 1]].map(([, dataType, value], i) => ({
    nodeId: nodes[i],
    attributeId: AttributeIds.Value,
    value: { value: { dataType, value } },
  }));
  const statuses = await session.write(writes);
  assert.deepEqual(
    statuses.map((s) => s.name),
    [...values.map(() => "Good"), "BadNodeIdUnknown"],
  );
  const dvs = await session.read(nodes.map((nodeId) => ({ nodeId, attributeId: AttributeIds.Value })));
  assert.equal(dvs.length, 6);
  values.forEach(([name, dataType, value], i) => {
    assert.equal(dvs[i].statusCode, StatusCodes.Good, name);
    assert.equal(dvs[i].value.dataType, dataType, name);
    assert.equal(dvs[i].value.value, value, name);
  });
  assert.equal(dvs[5].statusCode, StatusCodes.BadNodeIdUnknown);
});

test("browses Objects and Demo.Static", async () => {
  const [session] = sessions;
  const objects = await session.browse({ nodeId: "i=85", browseDirection: BrowseDirection.Forward, referenceTypeId: "HierarchicalReferences", includeSubtypes: true, resultMask: 63 });
  assert.equal(objects.statusCode, StatusCodes.Good);
  const names = objects.references.map((r) => r.browseName.name);
  for (const n of ["Server", "Demo", "BenchmarkValue0"]) assert.ok(names.includes(n), `${n} in ${names}`);
  const demo = await session.browse({ nodeId: "ns=1;s=Demo.Static", browseDirection: BrowseDirection.Forward, referenceTypeId: "HierarchicalReferences", includeSubtypes: true, resultMask: 63 });
  assert.equal(demo.statusCode, StatusCodes.Good);
  const children = demo.references.map((r) => r.browseName.name);
  for (const n of ["Int32", "Double", "String", "Boolean"]) assert.ok(children.includes(n), `${n} in ${children}`);
});

test("thirty pipelined Reads on one session each get their own value", async () => {
  const [, session] = sessions;
  const nodes = Array.from({ length: 30 }, (_, i) => `ns=1;i=${1001 + i}`);
  const statuses = await session.write(nodes.map((nodeId, i) => ({ nodeId, attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Int32, value: 9000 + i } } })));
  assert.ok(statuses.every((s) => s === StatusCodes.Good), `${statuses}`);
  const dvs = await Promise.all(nodes.map((nodeId) => session.read({ nodeId, attributeId: AttributeIds.Value })));
  assert.deepEqual(
    dvs.map((d) => d.value.value),
    nodes.map((_, i) => 9000 + i),
  );
});

test("a 50 ms subscription receives every value the other session writes, in order", async () => {
  const [subscriber, writer] = sessions;
  const node = DEMO + "Int32";
  const write = async (value) => {
    const s = await writer.write({ nodeId: node, attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Int32, value } } });
    assert.equal(s, StatusCodes.Good);
  };
  await write(70000);
  const sub = await ClientSubscription.create(subscriber, {
    requestedPublishingInterval: 50,
    requestedLifetimeCount: 1000,
    requestedMaxKeepAliveCount: 10,
    maxNotificationsPerPublish: 0,
    publishingEnabled: true,
    priority: 1,
  });
  try {
    const seen = [];
    const item = await ClientMonitoredItem.create(sub, { nodeId: node, attributeId: AttributeIds.Value }, { samplingInterval: 1, queueSize: 15, discardOldest: true }, TimestampsToReturn.Both);
    item.on("changed", (dv) => seen.push(dv.value.value));
    assert.ok(await waitFor(() => seen.includes(70000)), `initial value, got ${seen}`);
    for (let i = 1; i <= 15; i++) {
      await write(70000 + i);
      await sleep(100);
    }
    assert.ok(await waitFor(() => seen[seen.length - 1] === 70015), `last value, got ${seen}`);
    assert.deepEqual(
      seen.slice(seen.indexOf(70000) + 1),
      Array.from({ length: 15 }, (_, i) => 70001 + i),
    );
  } finally {
    await sub.terminate();
  }
});
