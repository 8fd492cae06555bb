// node-opcua-client (npm) reading history from the real uaring binary: values a client
// writes into the Demo folder's historized Setpoint read back raw (readHistoryValue, with
// node-opcua paging through continuation points), and processed reads with aggregates
// (readAggregateValue: TimeAverage, MinimumActualTime, Total and Delta over the written steps),
// and an aggregate the server does not compute refused with BadAggregateNotSupported.
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
  AggregateFunction,
} = require("node-opcua-client");
const { startServer, sleep } = require("./server");

const SETPOINT = "ns=1;s=Demo.History.Setpoint";

let server;
let client;
let session;
let dir;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "uaring-node-history-"));
  const cfg = path.join(dir, "history.toml");
  fs.writeFileSync(
    cfg,
    `[history]\nenabled = true\ndir = ${JSON.stringify(path.join(dir, "store"))}\nflush_interval_ms = 100\n`,
  );
  server = await startServer(["--config", cfg, "--pki", path.join(dir, "pki")]);
  client = OPCUAClient.create({
    applicationName: "uaring-interop-history",
    securityMode: MessageSecurityMode.None,
    securityPolicy: SecurityPolicy.None,
    endpointMustExist: false,
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
  });
  await client.connect(server.url);
  session = await client.createSession();
});

after(async () => {
  await session.close();
  await client.disconnect();
  const code = await server.stop();
  assert.equal(code, 0, "uaring must exit 0 on SIGTERM");
  fs.rmSync(dir, { recursive: true, force: true });
});

// Writes `values` with the given source timestamps.
async function writeAt(values) {
  for (const [t, v] of values) {
    const s = await session.write({
      nodeId: SETPOINT,
      attributeId: AttributeIds.Value,
      value: { value: { dataType: DataType.Double, value: v }, sourceTimestamp: t },
    });
    assert.equal(s, StatusCodes.Good);
  }
}

async function rawHistory(start, end, options) {
  const r = await session.readHistoryValue(SETPOINT, start, end, options);
  assert.ok(r.statusCode.isGood(), r.statusCode.toString());
  return r.historyData.dataValues;
}

async function waitHistory(start, end, n) {
  for (let i = 0; i < 100; i++) {
    const r = await session.readHistoryValue(SETPOINT, start, end, { returnBounds: false });
    // GoodNoData until the written values have reached the store: ask again.
    if (r.statusCode.value !== StatusCodes.GoodNoData.value) {
      assert.ok(r.statusCode.isGood(), r.statusCode.toString());
      if (r.historyData.dataValues.length >= n) return r.historyData.dataValues;
    }
    await sleep(100);
  }
  throw new Error(`fewer than ${n} values in the history`);
}

test("written values come back raw, in order, paged through continuation points", async () => {
  const t0 = new Date(Math.floor(Date.now() / 1000) * 1000 + 2000);
  const values = [];
  for (let i = 0; i < 25; i++) values.push([new Date(t0.getTime() + i * 100), i * 1.5]);
  await writeAt(values);
  const end = new Date(t0.getTime() + 25 * 100);
  const got = await waitHistory(t0, end, 25);
  assert.deepEqual(
    got.map((d) => d.value.value),
    values.map(([, v]) => v),
  );
  assert.deepEqual(
    got.map((d) => d.sourceTimestamp.getTime()),
    values.map(([t]) => t.getTime()),
  );
  // Four at a time: the first four, and a continuation point for the rest.
  const page = await session.readHistoryValue(SETPOINT, t0, end, {
    numValuesPerNode: 4,
    returnBounds: false,
  });
  assert.ok(page.statusCode.isGood());
  assert.deepEqual(
    page.historyData.dataValues.map((d) => d.value.value),
    values.slice(0, 4).map(([, v]) => v),
  );
  assert.ok(page.continuationPoint && page.continuationPoint.length > 0, "more to come");
});

test("processed reads: TimeAverage, MinimumActualTime, Total and Delta over steps the client wrote", async () => {
  // 10 for 1 s, then 20 for 1 s, then 30 (the end of the data).
  const t0 = new Date(Math.floor(Date.now() / 1000) * 1000 + 10000);
  await writeAt([
    [t0, 10],
    [new Date(t0.getTime() + 1000), 20],
    [new Date(t0.getTime() + 2000), 30],
  ]);
  await waitHistory(t0, new Date(t0.getTime() + 2001), 3);
  const [avg] = await session.readAggregateValue(
    [{ nodeId: SETPOINT }],
    t0,
    new Date(t0.getTime() + 2000),
    AggregateFunction.TimeAverage,
    1000,
  );
  assert.ok(avg.statusCode.isGood(), avg.statusCode.toString());
  const a = avg.historyData.dataValues;
  assert.equal(a.length, 2, "two intervals of 1 s");
  // Sloped interpolation between the raw values: the mean of each ramp.
  assert.ok(Math.abs(a[0].value.value - 15) < 1e-9, `${a[0].value.value}`);
  assert.ok(Math.abs(a[1].value.value - 25) < 1e-9, `${a[1].value.value}`);
  assert.equal(a[0].sourceTimestamp.getTime(), t0.getTime());
  const [min] = await session.readAggregateValue(
    [{ nodeId: SETPOINT }],
    t0,
    new Date(t0.getTime() + 2000),
    AggregateFunction.MinimumActualTime,
    2000,
  );
  const m = min.historyData.dataValues;
  assert.equal(m.length, 1);
  assert.equal(m[0].value.value, 10);
  assert.equal(m[0].sourceTimestamp.getTime(), t0.getTime(), "the time of the minimum");
  // Total (the time integral, value × s) per second, and Delta (last minus first raw value)
  // over the two seconds: aggregates offered once Part 13's AggregateExamples.csv checked them.
  const [total] = await session.readAggregateValue(
    [{ nodeId: SETPOINT }],
    t0,
    new Date(t0.getTime() + 2000),
    AggregateFunction.Total,
    1000,
  );
  assert.ok(total.statusCode.isGood(), total.statusCode.toString());
  const tv = total.historyData.dataValues;
  assert.deepEqual(
    tv.map((d) => d.value.value),
    [15, 25],
    "the mean of each ramp × 1 s",
  );
  // Good with the Calculated bit and the DataValue InfoType (Part 13 §5.3): 0x00000401.
  assert.deepEqual(
    tv.map((d) => d.statusCode.value),
    [0x401, 0x401],
  );
  const [delta] = await session.readAggregateValue(
    [{ nodeId: SETPOINT }],
    t0,
    new Date(t0.getTime() + 2000),
    AggregateFunction.Delta,
    2000,
  );
  assert.ok(delta.statusCode.isGood(), delta.statusCode.toString());
  const dv = delta.historyData.dataValues;
  assert.equal(dv.length, 1);
  assert.equal(dv[0].value.value, 10, "20 − 10: the raw values at t0 and t0 + 1 s");
  assert.equal(dv[0].statusCode.value, 0x401, dv[0].statusCode.toString());
  assert.equal(dv[0].sourceTimestamp.getTime(), t0.getTime());
  const [none] = await session.readAggregateValue(
    [{ nodeId: SETPOINT }],
    t0,
    new Date(t0.getTime() + 2000),
    AggregateFunction.AnnotationCount,
    1000,
  );
  assert.equal(none.statusCode, StatusCodes.BadAggregateNotSupported);
});
