// node-opcua-client (npm) through the aggregating gateway (docs/Gateway.md): uaring started with
// `--gateway URL` in front of asyncua's server (tests/interop/python/gateway_downstream.py, run
// with the repository's .venv). The client browses the mirrored tree, reads, writes, calls a
// method, subscribes and receives every change; the downstream is killed (SIGKILL), the
// subscription reports BadNotConnected, and after a restart on the same port the values resume
// on the same subscription. HistoryRead of the downstream's historized Variable (asyncua's
// in-memory store, four values an answer) is forwarded, continuation points and all.
"use strict";
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { spawn } = require("node:child_process");
const fs = require("node:fs");
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
  ReadRawModifiedDetails,
  HistoryReadRequest,
} = require("node-opcua-client");
const { startServer, waitFor, browseChildren, findMirrored } = require("./server");

const ROOT = path.resolve(__dirname, "..", "..", "..");
const SCRIPT = path.join(ROOT, "tests/interop/python/gateway_downstream.py");

function python() {
  const venv = path.join(ROOT, ".venv/bin/python");
  if (fs.existsSync(venv)) return venv;
  throw new Error("the repository's .venv (asyncua) is needed for the downstream server");
}

// asyncua's server on `port` (0: any); resolves with { port, url, kill }.
function startDownstream(port = 0) {
  return new Promise((resolve, reject) => {
    const proc = spawn(python(), [SCRIPT, String(port)], { stdio: ["ignore", "pipe", "ignore"] });
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      reject(new Error("the downstream did not start within 30 s"));
    }, 30000);
    readline.createInterface({ input: proc.stdout }).on("line", (line) => {
      if (!line.startsWith("listening ")) return;
      clearTimeout(timer);
      const p = Number(line.split(" ")[1]);
      resolve({
        port: p,
        historyStart: new Date(line.split(" ")[2]),
        url: `opc.tcp://127.0.0.1:${p}`,
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
      reject(new Error(`the downstream exited early with ${code}`));
    });
  });
}

let down;
let server;
let client;
let session;

before(async () => {
  down = await startDownstream();
  server = await startServer(["--gateway", down.url]);
  client = OPCUAClient.create({
    applicationName: "uaring-interop-gateway",
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
  const code = server ? await server.stop() : 0;
  if (down) await down.kill();
  assert.equal(code, 0, `uaring exited with ${code} on SIGTERM`);
});

// The NodeId of Objects/<names…> once the gateway has mirrored it.
const find = (...names) => findMirrored(session, ...names);
const childrenOf = (nodeId) => browseChildren(session, nodeId);

test("the mirrored tree is browsed, read, written and called", async () => {
  const name = `127.0.0.1_${down.port}`;
  const line = await find(name, "Line1");
  const kids = (await childrenOf(line)).map((r) => r.browseName.name);
  for (const k of ["Counter", "Setpoint", "Add", "Alarm"]) assert.ok(kids.includes(k), kids.join());

  const counter = await find(name, "Line1", "Counter");
  const v = await session.read({ nodeId: counter, attributeId: AttributeIds.Value }, 0);
  assert.equal(v.statusCode, StatusCodes.Good);
  assert.equal(v.value.dataType, DataType.Double);

  const setpoint = await find(name, "Line1", "Setpoint");
  const s = await session.write({
    nodeId: setpoint,
    attributeId: AttributeIds.Value,
    value: { value: { dataType: DataType.Int32, value: 777 } },
  });
  assert.equal(s, StatusCodes.Good);
  const back = await session.read({ nodeId: setpoint, attributeId: AttributeIds.Value }, 0);
  assert.equal(back.value.value, 777);

  const add = await find(name, "Line1", "Add");
  const r = await session.call({
    objectId: line,
    methodId: add,
    inputArguments: [
      { dataType: DataType.Int32, value: 20 },
      { dataType: DataType.Int32, value: 22 },
    ],
  });
  assert.equal(r.statusCode, StatusCodes.Good);
  assert.equal(r.outputArguments[0].value, 42);
});

test("history reads are forwarded, continuation points and all", async () => {
  const name = `127.0.0.1_${down.port}`;
  const node = await find(name, "Line1", "History");
  const level = await session.read({ nodeId: node, attributeId: AttributeIds.AccessLevel });
  assert.ok(level.value.value & 0x04, `AccessLevel ${level.value.value} has HistoryRead`);
  const start = down.historyStart;
  const details = new ReadRawModifiedDetails({
    isReadModified: false,
    startTime: new Date(start.getTime() - 1000),
    endTime: new Date(start.getTime() + 20000),
    numValuesPerNode: 0,
    returnBounds: false,
  });
  const values = [];
  let cp = null;
  for (let round = 0; round < 10; round++) {
    const r = await session.historyRead(
      new HistoryReadRequest({
        historyReadDetails: details,
        timestampsToReturn: TimestampsToReturn.Both,
        nodesToRead: [{ nodeId: node, continuationPoint: cp }],
      }),
    );
    const res = r.results[0];
    assert.ok(res.statusCode.isGood(), res.statusCode.toString());
    values.push(...res.historyData.dataValues);
    cp = res.continuationPoint && res.continuationPoint.length > 0 ? res.continuationPoint : null;
    if (!cp) break;
  }
  assert.deepEqual(
    values.map((d) => d.value.value),
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
  );
  assert.equal(values[9].sourceTimestamp.getTime(), start.getTime() + 9000);
});

test("a subscription gets every change, BadNotConnected while the downstream is away, and resumes", async () => {
  const name = `127.0.0.1_${down.port}`;
  const counter = await find(name, "Line1", "Counter");
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
  assert.ok(await waitFor(() => seen.length >= 20, 20000), `${seen.length} changes`);
  const values = seen.filter((d) => d.statusCode === StatusCodes.Good).map((d) => d.value.value);
  const steps = values.slice(2).map((x, i) => x - values[i + 1]);
  assert.ok(steps.length > 0 && steps.every((d) => d === 1), values.join());

  await down.kill();
  const bad = () => seen.some((d) => d.statusCode === StatusCodes.BadNotConnected);
  assert.ok(await waitFor(bad, 20000), "BadNotConnected on the subscription");
  const n = seen.length;
  down = await startDownstream(down.port);
  const resumed = () => seen.slice(n).some((d) => d.statusCode === StatusCodes.Good);
  assert.ok(await waitFor(resumed, 40000, 50), "values again after the restart");
  await sub.terminate();
});
