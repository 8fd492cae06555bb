// node-opcua-client (npm) events, conditions and methods against the real uaring binary:
// an event monitored item with select and where clauses, events raised on demand by
// Demo.Methods.GenerateEvent, ConditionRefresh of the Demo alarm, Call validation.
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
  constructEventFilter,
  ofType,
  resolveNodeId,
} = require("node-opcua-client");
const { startServer, sleep, waitFor } = require("./server");

let server;
let client;
let session;

before(async () => {
  server = await startServer();
  client = OPCUAClient.create({
    applicationName: "uaring-interop-events",
    securityMode: MessageSecurityMode.None,
    securityPolicy: SecurityPolicy.None,
    endpointMustExist: false,
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
  });
  await client.connect(server.url);
  session = await client.createSession();
});

after(async () => {
  if (session) await session.close();
  if (client) await client.disconnect();
  assert.equal(await server.stop(), 0);
});

async function generate(message, severity) {
  const r = await session.call({
    objectId: "ns=1;s=Demo.Methods",
    methodId: "ns=1;s=Demo.Methods.GenerateEvent",
    inputArguments: [
      { dataType: DataType.String, value: message },
      { dataType: DataType.UInt16, value: severity },
    ],
  });
  assert.equal(r.statusCode, StatusCodes.Good);
}

test("event monitored items with select and where clauses", async () => {
  const sub = await ClientSubscription.create(session, { requestedPublishingInterval: 50, requestedMaxKeepAliveCount: 10, requestedLifetimeCount: 100, publishingEnabled: true });
  const all = [];
  const filtered = [];
  const fields = ["EventType", "Message", "Severity", "SourceName"];
  const onServer = await ClientMonitoredItem.create(
    sub,
    { nodeId: resolveNodeId("Server"), attributeId: AttributeIds.EventNotifier },
    { queueSize: 100, filter: constructEventFilter(fields) },
    TimestampsToReturn.Both,
  );
  onServer.on("changed", (evt) => all.push(evt));
  // Only events of the Demo event type (OfType) from Demo.Events.
  const onDemo = await ClientMonitoredItem.create(
    sub,
    { nodeId: "ns=1;s=Demo.Events", attributeId: AttributeIds.EventNotifier },
    { queueSize: 100, filter: constructEventFilter(fields, ofType("ns=1;s=DemoEventType")) },
    TimestampsToReturn.Both,
  );
  onDemo.on("changed", (evt) => filtered.push(evt));
  await sleep(200);
  await generate("from node-opcua", 321);
  const mine = (list) => list.filter((e) => e[1].value && e[1].value.text === "from node-opcua");
  assert.ok(await waitFor(() => mine(all).length === 1 && mine(filtered).length === 1), `server ${all.length}, demo ${filtered.length}`);
  const e = mine(all)[0];
  assert.equal(e[2].value, 321);
  assert.equal(e[3].value, "Events");
  // The OfType clause keeps the alarm's condition events off the filtered item.
  assert.ok(filtered.every((x) => x[0].value.toString() === "ns=1;s=DemoEventType"));
  await sub.terminate();
});

test("ConditionRefresh replays the retained Demo alarm between the refresh bracket", async () => {
  const active = async () => (await session.read({ nodeId: "ns=1;s=Demo.Events.Alarm.ActiveState.Id", attributeId: AttributeIds.Value })).value.value;
  const end = Date.now() + 25000;
  while (!(await active()) && Date.now() < end) await sleep(100);
  assert.equal(await active(), true, "the Demo alarm goes active every 20 s");
  const sub = await ClientSubscription.create(session, { requestedPublishingInterval: 50, requestedMaxKeepAliveCount: 10, requestedLifetimeCount: 100, publishingEnabled: true });
  const seen = [];
  const item = await ClientMonitoredItem.create(
    sub,
    { nodeId: "ns=1;s=Demo.Events", attributeId: AttributeIds.EventNotifier },
    { queueSize: 100, filter: constructEventFilter(["EventType", "SourceName", "Retain"]) },
    TimestampsToReturn.Both,
  );
  item.on("changed", (evt) => seen.push(evt[0].value.toString()));
  await sleep(150);
  const r = await session.call({
    objectId: "i=2782", // ConditionType
    methodId: "i=3875", // ConditionRefresh
    inputArguments: [{ dataType: DataType.UInt32, value: sub.subscriptionId }],
  });
  assert.equal(r.statusCode, StatusCodes.Good);
  assert.ok(await waitFor(() => seen.includes("ns=0;i=2788")), `seen ${seen}`);
  const start = seen.indexOf("ns=0;i=2787");
  const stop = seen.indexOf("ns=0;i=2788");
  assert.ok(start >= 0 && start < stop);
  assert.ok(seen.slice(start + 1, stop).includes("ns=0;i=2915"), `alarm in the refresh: ${seen}`);
  await sub.terminate();
});

test("Call validates arguments per Part 4", async () => {
  const ok = await session.call({
    objectId: "ns=1;s=Demo.Methods",
    methodId: "ns=1;s=Demo.Methods.Add",
    inputArguments: [
      { dataType: DataType.Double, value: 1.25 },
      { dataType: DataType.Double, value: 2 },
    ],
  });
  assert.equal(ok.statusCode, StatusCodes.Good);
  assert.equal(ok.outputArguments[0].value, 3.25);
  const missing = await session.call({ objectId: "ns=1;s=Demo.Methods", methodId: "ns=1;s=Demo.Methods.Add", inputArguments: [{ dataType: DataType.Double, value: 1 }] });
  assert.equal(missing.statusCode, StatusCodes.BadArgumentsMissing);
  const wrong = await session.call({
    objectId: "ns=1;s=Demo.Methods",
    methodId: "ns=1;s=Demo.Methods.Add",
    inputArguments: [
      { dataType: DataType.String, value: "one" },
      { dataType: DataType.Double, value: 2 },
    ],
  });
  assert.equal(wrong.statusCode, StatusCodes.BadInvalidArgument);
  assert.equal(wrong.inputArgumentResults[0], StatusCodes.BadTypeMismatch);
  // Declared bounds: Severity 1..=1000, Message at most 4096 characters (Part 4 §5.11.2:
  // BadOutOfRange for the argument, BadInvalidArgument for the call).
  const outOfRange = await session.call({
    objectId: "ns=1;s=Demo.Methods",
    methodId: "ns=1;s=Demo.Methods.GenerateEvent",
    inputArguments: [
      { dataType: DataType.String, value: "x".repeat(4097) },
      { dataType: DataType.UInt16, value: 1001 },
    ],
  });
  assert.equal(outOfRange.statusCode, StatusCodes.BadInvalidArgument);
  assert.deepEqual(outOfRange.inputArgumentResults, [StatusCodes.BadOutOfRange, StatusCodes.BadOutOfRange]);
  const notThere = await session.call({ objectId: "ns=1;s=Demo.Methods", methodId: "ns=1;s=Demo.Events.Alarm.Acknowledge", inputArguments: [] });
  assert.equal(notThere.statusCode, StatusCodes.BadMethodInvalid);
});
