// node-opcua-client (npm) through the aggregating gateway (docs/Gateway.md) in front of
// node-opcua's server (npm node-opcua-server, ./downstream_server.js): uaring started with
// `--gateway URL` (the quick start: the mirror is named after the host and port). The client
// browses the mirrored tree, reads, writes (checked on node-opcua's server directly), calls a
// method with arguments, receives the event node-opcua raises, subscribes to the 20 Hz counter
// and receives every change; node-opcua's server is killed (SIGKILL), the subscription reports
// BadNotConnected, and after a restart on the same port the values resume on the same
// subscription.
"use strict";
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { spawn } = require("node:child_process");
const net = require("node:net");
const path = require("node:path");
const readline = require("node:readline");
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
  constructEventFilter,
  resolveNodeId,
} = require("node-opcua-client");
const { startServer, sleep, waitFor, browseChildren, findMirrored } = require("./server");

const NS = "urn:test:node-plant";

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// node-opcua's server on `port`; resolves with { port, url, kill }.
function startDownstream(port) {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, [path.join(__dirname, "downstream_server.js"), String(port)], {
      stdio: ["ignore", "pipe", "ignore"],
    });
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      reject(new Error("node-opcua's server did not start within 30 s"));
    }, 30000);
    readline.createInterface({ input: proc.stdout }).on("line", (line) => {
      if (line.trim() !== `listening ${port}`) return;
      clearTimeout(timer);
      resolve({
        port,
        url: `opc.tcp://127.0.0.1:${port}`,
        kill: () =>
          new Promise((res) => {
            if (proc.exitCode !== null || proc.signalCode !== null) return res();
            proc.once("exit", () => res());
            proc.kill("SIGKILL");
          }),
      });
    });
    proc.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`node-opcua's server exited early with ${code}`));
    });
  });
}

function newClient(name) {
  return OPCUAClient.create({
    applicationName: name,
    securityMode: MessageSecurityMode.None,
    securityPolicy: SecurityPolicy.None,
    endpointMustExist: false,
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
  });
}

let down;
let server;
let client;
let session;
let name;

before(async () => {
  down = await startDownstream(await freePort());
  name = `127.0.0.1_${down.port}`;
  server = await startServer(["--gateway", down.url]);
  client = newClient("uaring-interop-gateway-node");
  await client.connect(server.url);
  session = await client.createSession();
});

after(async () => {
  if (session) await session.close();
  if (client) await client.disconnect();
  const code = server ? await server.stop() : 0;
  if (down) await down.kill();
  assert.equal(code, 0, `uaring exited with ${code} on SIGTERM`);
});

// The NodeId of Objects/<names…> once the gateway has mirrored it.
const find = (...names) => findMirrored(session, ...names);
const childrenOf = (nodeId) => browseChildren(session, nodeId);

test("node-opcua's tree is browsed, read, written and called; its event comes through", async () => {
  const plant = await find(name, "Plant");
  const nsArray = (await session.read({ nodeId: "i=2255", attributeId: AttributeIds.Value })).value.value;
  const mapped = nsArray.indexOf(`urn:uaring:gateway:${name}:${NS}`);
  assert.ok(mapped > 0 && !nsArray.includes(NS), nsArray.join());
  assert.equal(plant, `ns=${mapped};s=Plant`);
  const kids = (await childrenOf(plant)).map((r) => r.browseName.name).sort();
  assert.deepEqual(kids, ["Alarm", "Counter", "Scale", "Setpoint", "Temperature"]);

  const temperature = `ns=${mapped};s=Plant.Temperature`;
  const t = await session.read({ nodeId: temperature, attributeId: AttributeIds.Value }, 0);
  assert.equal(t.statusCode, StatusCodes.Good);
  assert.equal(t.value.dataType, DataType.Double);
  assert.equal(t.value.value, 21.5);
  const c = await session.read({ nodeId: `ns=${mapped};s=Plant.Counter`, attributeId: AttributeIds.Value }, 0);
  assert.equal(c.statusCode, StatusCodes.Good);
  assert.equal(c.value.dataType, DataType.UInt32);
  assert.ok(c.value.value >= 1);

  // A Write goes to node-opcua's server: seen there directly.
  const setpoint = `ns=${mapped};s=Plant.Setpoint`;
  const s = await session.write({
    nodeId: setpoint,
    attributeId: AttributeIds.Value,
    value: { value: { dataType: DataType.Int32, value: 777 } },
  });
  assert.equal(s, StatusCodes.Good);
  const direct = newClient("uaring-interop-gateway-node");
  await direct.connect(down.url);
  const ds = await direct.createSession();
  try {
    const idx = (await ds.readNamespaceArray()).indexOf(NS);
    const there = await ds.read({ nodeId: `ns=${idx};s=Plant.Setpoint`, attributeId: AttributeIds.Value });
    assert.equal(there.value.value, 777);
  } finally {
    await ds.close();
    await direct.disconnect();
  }
  const back = await session.read({ nodeId: setpoint, attributeId: AttributeIds.Value }, 0);
  assert.equal(back.value.value, 777);
  const refused = await session.write({
    nodeId: temperature,
    attributeId: AttributeIds.Value,
    value: { value: { dataType: DataType.Double, value: 1 } },
  });
  assert.equal(refused, StatusCodes.BadNotWritable);

  // A Call is forwarded, arguments and output translated.
  const r = await session.call({
    objectId: plant,
    methodId: `ns=${mapped};s=Plant.Scale`,
    inputArguments: [
      { dataType: DataType.Double, value: 1.5 },
      { dataType: DataType.Int32, value: 6 },
    ],
  });
  assert.equal(r.statusCode, StatusCodes.Good);
  assert.equal(r.outputArguments.length, 1);
  assert.equal(r.outputArguments[0].dataType, DataType.Double);
  assert.equal(r.outputArguments[0].value, 9);

  // The event node-opcua raises from Plant reaches the Server object's subscribers here, with
  // the mirrored Plant as its source.
  const sub = await ClientSubscription.create(session, {
    requestedPublishingInterval: 50,
    requestedMaxKeepAliveCount: 10,
    requestedLifetimeCount: 100,
    publishingEnabled: true,
  });
  const events = [];
  const item = await ClientMonitoredItem.create(
    sub,
    { nodeId: resolveNodeId("Server"), attributeId: AttributeIds.EventNotifier },
    { queueSize: 100, filter: constructEventFilter(["EventType", "Message", "Severity", "SourceName", "SourceNode"]) },
    TimestampsToReturn.Both,
  );
  item.on("changed", (evt) => events.push(evt));
  await sleep(200);
  const a = await session.call({
    objectId: plant,
    methodId: `ns=${mapped};s=Plant.Alarm`,
    inputArguments: [{ dataType: DataType.String, value: "from node-opcua" }],
  });
  assert.equal(a.statusCode, StatusCodes.Good);
  const mine = () => events.filter((e) => e[1].value && e[1].value.text === "from node-opcua");
  assert.ok(await waitFor(() => mine().length === 1, 10000), `${events.length} events`);
  const e = mine()[0];
  assert.equal(e[0].value.toString(), "ns=0;i=2041"); // BaseEventType
  assert.equal(e[2].value, 700);
  assert.equal(e[3].value, "Plant");
  assert.equal(e[4].value.toString(), plant);
  await sub.terminate();
});

test("every change of the counter, BadNotConnected while node-opcua is away, then it resumes", async () => {
  const counter = await find(name, "Plant", "Counter");
  const sub = ClientSubscription.create(session, {
    requestedPublishingInterval: 50,
    requestedLifetimeCount: 1000,
    requestedMaxKeepAliveCount: 10,
    maxNotificationsPerPublish: 0,
    publishingEnabled: true,
    priority: 1,
  });
  const seen = [];
  const item = ClientMonitoredItem.create(
    sub,
    { nodeId: counter, attributeId: AttributeIds.Value },
    { samplingInterval: 0, queueSize: 100, discardOldest: true },
    TimestampsToReturn.Both,
  );
  item.on("changed", (dv) => seen.push(dv));
  const good = (list) => list.filter((d) => d.statusCode === StatusCodes.Good).map((d) => d.value.value);
  assert.ok(await waitFor(() => good(seen).length >= 40, 20000), `${seen.length} changes`);
  // The first is the mirrored cell as it was; every one after it is the next count.
  const values = good(seen);
  const steps = values.slice(2).map((x, i) => x - values[i + 1]);
  assert.ok(steps.length >= 38 && steps.every((d) => d === 1), values.join());

  await down.kill();
  const bad = () => seen.some((d) => d.statusCode === StatusCodes.BadNotConnected);
  assert.ok(await waitFor(bad, 20000), "BadNotConnected on the subscription");
  const r = await session.read({ nodeId: counter, attributeId: AttributeIds.Value });
  assert.equal(r.statusCode, StatusCodes.BadNotConnected);
  const w = await session.write({
    nodeId: await find(name, "Plant", "Setpoint"),
    attributeId: AttributeIds.Value,
    value: { value: { dataType: DataType.Int32, value: 5 } },
  });
  assert.equal(w, StatusCodes.BadNotConnected);
  const n = seen.length;
  down = await startDownstream(down.port);
  // The new instance counts from 1 again: the values resume on the same subscription.
  assert.ok(await waitFor(() => good(seen.slice(n)).length >= 10, 40000, 50), "values again after the restart");
  const again = good(seen.slice(n));
  const steps2 = again.slice(2).map((x, i) => x - again[i + 1]);
  assert.ok(steps2.every((d) => d === 1), again.join());
  await sub.terminate();
});
