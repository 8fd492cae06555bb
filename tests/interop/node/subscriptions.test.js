// node-opcua-client (npm) subscriptions against the real uaring binary: data changes with
// queues of 1 and 20, discard policy, absolute deadband, monitoring modes, keep-alive, and
// a subscription over Basic256Sha256 SignAndEncrypt.
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
  ClientSubscription,
  ClientMonitoredItem,
  TimestampsToReturn,
  MonitoringMode,
  DataChangeFilter,
  DataChangeTrigger,
  DeadbandType,
} = require("node-opcua-client");
const { startServer, sleep, waitFor } = require("./server");

let server;
let client;
let session;

const INT32 = "ns=1;s=Demo.Static.Int32";
const DOUBLE = "ns=1;s=Demo.Static.Double";

function newClient(extra = {}) {
  return OPCUAClient.create({
    applicationName: "uaring-interop-subs",
    securityMode: MessageSecurityMode.None,
    securityPolicy: SecurityPolicy.None,
    endpointMustExist: false,
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
    requestedSessionTimeout: 60000,
    ...extra,
  });
}

async function write(nodeId, dataType, value) {
  const s = await session.write({ nodeId, attributeId: AttributeIds.Value, value: { value: { dataType, value } } });
  assert.equal(s, StatusCodes.Good);
}

async function subscribe(sess, publishingInterval = 50, keepAlive = 10) {
  return ClientSubscription.create(sess, {
    requestedPublishingInterval: publishingInterval,
    requestedLifetimeCount: 1000,
    requestedMaxKeepAliveCount: keepAlive,
    maxNotificationsPerPublish: 0,
    publishingEnabled: true,
    priority: 1,
  });
}

async function monitor(sub, nodeId, params, mode = MonitoringMode.Reporting) {
  const seen = [];
  const item = await ClientMonitoredItem.create(sub, { nodeId, attributeId: AttributeIds.Value }, params, TimestampsToReturn.Both, mode);
  item.on("changed", (dv) => seen.push(dv));
  return { item, seen };
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

test("queue of 20 delivers every write in order; queue of 1 ends on the last", async () => {
  await write(INT32, DataType.Int32, 0);
  const sub = await subscribe(session, 500);
  const q20 = await monitor(sub, INT32, { samplingInterval: 1, queueSize: 20, discardOldest: true });
  const q1 = await monitor(sub, INT32, { samplingInterval: 1, queueSize: 1, discardOldest: true });
  assert.ok(await waitFor(() => q20.seen.length >= 1 && q1.seen.length >= 1), "initial values");
  for (let i = 1; i <= 10; i++) {
    await write(INT32, DataType.Int32, 100 + i);
    await sleep(10);
  }
  assert.ok(await waitFor(() => q20.seen.some((d) => d.value.value === 110) && q1.seen.some((d) => d.value.value === 110)));
  const all = q20.seen.map((d) => d.value.value).filter((v) => v > 100);
  assert.deepEqual(all, [101, 102, 103, 104, 105, 106, 107, 108, 109, 110]);
  const last = q1.seen.map((d) => d.value.value).filter((v) => v > 100);
  assert.ok(last.length < all.length, `queue of 1 got ${last}`);
  assert.equal(last[last.length - 1], 110);
  await sub.terminate();
});

test("discardOldest false keeps the first values and marks the overflow", async () => {
  await write(INT32, DataType.Int32, 0);
  const sub = await subscribe(session, 1000);
  const m = await monitor(sub, INT32, { samplingInterval: 1, queueSize: 3, discardOldest: false });
  assert.ok(await waitFor(() => m.seen.length >= 1));
  for (const v of [1, 2, 3, 4, 5]) {
    await write(INT32, DataType.Int32, v);
    await sleep(10);
  }
  assert.ok(await waitFor(() => m.seen.some((d) => d.value.value === 5), 4000));
  const vals = m.seen.slice(1).map((d) => d.value.value);
  assert.deepEqual(vals, [1, 2, 5]);
  const overflow = m.seen[m.seen.length - 1].statusCode.value & 0xffff;
  assert.equal(overflow, 0x0480, "overflow bit on the value that replaced the newest");
  await sub.terminate();
});

test("absolute deadband suppresses small changes", async () => {
  await write(DOUBLE, DataType.Double, 0.0);
  const sub = await subscribe(session, 50);
  const filter = new DataChangeFilter({ trigger: DataChangeTrigger.StatusValue, deadbandType: DeadbandType.Absolute, deadbandValue: 2.0 });
  const m = await monitor(sub, DOUBLE, { samplingInterval: 1, queueSize: 10, filter });
  assert.ok(await waitFor(() => m.seen.length >= 1));
  for (const v of [1.0, 1.5, 2.5, 3.0, 5.0]) {
    await write(DOUBLE, DataType.Double, v);
    await sleep(15);
  }
  assert.ok(await waitFor(() => m.seen.some((d) => d.value.value === 5.0)));
  assert.deepEqual(m.seen.map((d) => d.value.value), [0.0, 2.5, 5.0]);
  await sub.terminate();
});

test("monitoring mode Sampling reports nothing until set to Reporting", async () => {
  await write(INT32, DataType.Int32, 7);
  const sub = await subscribe(session, 50);
  const m = await monitor(sub, INT32, { samplingInterval: 1, queueSize: 5 }, MonitoringMode.Sampling);
  await write(INT32, DataType.Int32, 8);
  await sleep(300);
  assert.equal(m.seen.length, 0);
  await m.item.setMonitoringMode(MonitoringMode.Reporting);
  assert.ok(await waitFor(() => m.seen.some((d) => d.value.value === 8)));
  await sub.terminate();
});

test("keep-alives arrive when nothing changes", async () => {
  const sub = await subscribe(session, 50, 2);
  let keepalives = 0;
  sub.on("keepalive", () => keepalives++);
  assert.ok(await waitFor(() => keepalives >= 3, 3000), `keep-alives: ${keepalives}`);
  await sub.terminate();
});

test("a subscription over Basic256Sha256 SignAndEncrypt (contract mode)", async () => {
  const fs = require("node:fs");
  const pki = fs.mkdtempSync(require("node:path").join(require("node:os").tmpdir(), "uaring-pki-"));
  const secured = await startServer(["--contract", "--pki", pki]);
  const c = newClient({ securityMode: MessageSecurityMode.SignAndEncrypt, securityPolicy: SecurityPolicy.Basic256Sha256 });
  try {
    await c.connect(secured.url);
    const s = await c.createSession();
    const sub = await subscribe(s, 50);
    const m = await monitor(sub, "ns=1;i=1001", { samplingInterval: 1, queueSize: 10 });
    assert.ok(await waitFor(() => m.seen.length >= 1));
    for (const v of [71, 72, 73]) {
      const st = await s.write({ nodeId: "ns=1;i=1001", attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Int32, value: v } } });
      assert.equal(st, StatusCodes.Good);
      await sleep(15);
    }
    assert.ok(await waitFor(() => m.seen.some((d) => d.value.value === 73)));
    assert.deepEqual(m.seen.slice(1).map((d) => d.value.value), [71, 72, 73]);
    await sub.terminate();
    await s.close();
  } finally {
    await c.disconnect();
    const code = await secured.stop();
    fs.rmSync(pki, { recursive: true, force: true });
    assert.equal(code, 0);
  }
});
