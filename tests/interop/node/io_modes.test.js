// node-opcua-client (npm) against the real uaring binary in each io_uring I/O mode of the
// shard loop (docs/Architecture.md "I/O modes"): SQPOLL (a kernel poller per shard), busy
// polling (spin before sleep), fixed files, zero-copy sends of every batch, and registered
// send buffers (named by index in those zero-copy sends), each on one shard and on two
// (round robin, so the subscriber's reconnect lands on the other shard and its connection
// moves to the shard that owns the session).
//
// Per mode and shard count, one server and two clients: a writer, and a subscriber that
// reaches the server through a TCP relay. The writer writes several values and reads them
// back; the subscriber's monitored item receives every written value in order; then the relay
// drops the subscriber's connection (no CloseSession), node-opcua reconnects and resumes the
// same session, and the next values arrive on it. The statistics file shows the mode in force
// (its counters moved), and the server exits 0 on SIGTERM.
"use strict";
const { test } = require("node:test");
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
} = require("node-opcua-client");
const { startServer, startRelay, sleep, waitFor } = require("./server");

const INT32 = "ns=1;s=Demo.Static.Int32";
const DOUBLE = "ns=1;s=Demo.Static.Double";
const STRING = "ns=1;s=Demo.Static.String";

const sum = (shards, key) => shards.reduce((n, s) => n + (s[key] || 0), 0);

/** The server's SQPOLL poller threads (`iou-sqp-*`). */
function pollers(pid) {
  return fs
    .readdirSync(`/proc/${pid}/task`)
    .map((t) => {
      try {
        return fs.readFileSync(`/proc/${pid}/task/${t}/comm`, "utf8").trim();
      } catch {
        return "";
      }
    })
    .filter((n) => n.startsWith("iou-sqp-")).length;
}

const MODES = [
  {
    name: "SQPOLL",
    args: ["--sqpoll", "per-shard"],
    check: (st, shards, pid) => {
      assert.ok(st.every((s) => s.sqpoll === "per-shard"), "sqpoll per-shard");
      assert.equal(pollers(pid), shards, "one poller thread per shard");
    },
  },
  {
    name: "busy polling",
    args: ["--busy-poll-us", "50"],
    check: (st) => {
      assert.ok(st.every((s) => s.busy_poll_us === 50));
      assert.ok(sum(st, "busy_polls") > 0 && sum(st, "busy_poll_ns") > 0, "spins counted");
    },
  },
  {
    name: "fixed files",
    args: ["--fixed-files"],
    check: (st) => {
      assert.ok(st.every((s) => s.fixed_files === true));
      // The writer, the subscriber, and its connection again after the reconnect (twice
      // where it moved: in the accepting shard's table, then in the owner's).
      assert.ok(sum(st, "fixed_files_registered") >= 3, "sockets put into the file tables");
    },
  },
  {
    name: "zero-copy sends",
    args: ["--zero-copy-send-min", "1"],
    check: (st) => {
      assert.ok(sum(st, "zc_sends") > 0 && sum(st, "zc_notifs") > 0, "zero-copy sends and their notifications");
      assert.ok(sum(st, "zc_copied") >= 1, "loopback: the kernel copies");
    },
  },
  {
    name: "registered send buffers",
    args: ["--fixed-send-buffers", "8", "--zero-copy-send-min", "1"],
    check: (st) => {
      assert.ok(st.every((s) => s.fixed_send_buffers === 8));
      assert.ok(sum(st, "fixed_buf_sends") > 0, "sends named a registered buffer");
      assert.equal(sum(st, "fixed_buf_exhausted"), 0, "four connections' worth per shard: never exhausted");
    },
  },
];

function newClient(extra = {}) {
  return OPCUAClient.create({
    applicationName: "uaring-interop-io-modes",
    securityMode: MessageSecurityMode.None,
    securityPolicy: SecurityPolicy.None,
    endpointMustExist: false,
    requestedSessionTimeout: 60000,
    ...extra,
  });
}

/** The statistics file, rewritten at once (SIGUSR1): its shards. */
async function shardStats(server, statsPath) {
  const before = fs.existsSync(statsPath) ? fs.statSync(statsPath).mtimeMs : 0;
  server.proc.kill("SIGUSR1");
  await waitFor(() => fs.existsSync(statsPath) && fs.statSync(statsPath).mtimeMs !== before, 10000);
  for (let i = 0; i < 50; i++) {
    try {
      return JSON.parse(fs.readFileSync(statsPath, "utf8")).shards;
    } catch {
      await sleep(20);
    }
  }
  throw new Error("no statistics file");
}

async function serves(mode, shards) {
  const statsPath = path.join(os.tmpdir(), `uaring-io-modes-node-${process.pid}-${shards}-${mode.args.join("")}.json`);
  const cpus = shards === 2 && os.cpus().length >= 2 ? ["--cpus", "0-1"] : [];
  const server = await startServer([
    ...cpus,
    "--io-backend",
    "uring",
    "--shards",
    String(shards),
    "--distribution",
    "round-robin",
    "--stats-file",
    statsPath,
    ...mode.args,
  ]);
  const relay = await startRelay(server.url);
  const writerClient = newClient({ connectionStrategy: { maxRetry: 0 } });
  const client = newClient({ connectionStrategy: { maxRetry: 1000, initialDelay: 20, maxDelay: 100 }, keepSessionAlive: false });
  let writer;
  let session;
  try {
    await writerClient.connect(server.url);
    writer = await writerClient.createSession();
    const write = async (nodeId, dataType, value) => {
      const s = await writer.write({ nodeId, attributeId: AttributeIds.Value, value: { value: { dataType, value } } });
      assert.equal(s, StatusCodes.Good);
    };
    // Writes and a Read of several values in one request.
    await write(DOUBLE, DataType.Double, 2.5);
    await write(STRING, DataType.String, mode.name);
    await write(INT32, DataType.Int32, 0);
    const read = await writer.read([DOUBLE, STRING, INT32].map((nodeId) => ({ nodeId, attributeId: AttributeIds.Value })));
    assert.deepEqual(
      read.map((dv) => dv.value.value),
      [2.5, mode.name, 0],
    );

    await client.connect(relay.url);
    session = await client.createSession();
    const sessionId = session.sessionId.toString();
    let restored = 0;
    session.on("session_restored", () => restored++);
    const sub = await ClientSubscription.create(session, {
      requestedPublishingInterval: 20,
      requestedLifetimeCount: 3000,
      requestedMaxKeepAliveCount: 10,
      maxNotificationsPerPublish: 0,
      publishingEnabled: true,
      priority: 1,
    });
    const item = await ClientMonitoredItem.create(
      sub,
      { nodeId: INT32, attributeId: AttributeIds.Value },
      { samplingInterval: 0, queueSize: 100, discardOldest: false },
      TimestampsToReturn.Both,
    );
    const seen = [];
    item.on("changed", (dv) => seen.push(dv.value.value));
    const arrives = async (v) =>
      assert.ok(await waitFor(() => seen.includes(v), 15000), `${mode.name}, ${shards} shard(s): value ${v} not delivered; got ${seen}`);
    await arrives(0);
    for (let v = 1; v <= 5; v++) {
      await write(INT32, DataType.Int32, v);
      await arrives(v);
    }
    // A network blip: the relay drops the subscriber's connection; node-opcua reconnects
    // (on two shards, to the other one: round robin) and resumes the same session.
    relay.drop();
    assert.ok(await waitFor(() => restored > 0, 15000), "session restored after the drop");
    assert.equal(session.sessionId.toString(), sessionId, "the same session");
    for (let v = 6; v <= 10; v++) {
      await write(INT32, DataType.Int32, v);
      await arrives(v);
    }
    assert.deepEqual(
      seen.filter((v, i) => i === 0 || v !== seen[i - 1]),
      Array.from({ length: 11 }, (_, i) => i),
      "every value once, in order",
    );
    const readBack = await session.read({ nodeId: INT32, attributeId: AttributeIds.Value });
    assert.equal(readBack.value.value, 10, "a Read on the resumed session");

    const st = await shardStats(server, statsPath);
    assert.equal(st.length, shards);
    mode.check(st, shards, server.proc.pid);
    if (shards === 2) {
      assert.ok(sum(st, "accepted") >= 3, "connections on both shards");
    }
    await sub.terminate();
  } finally {
    if (session) await session.close().catch(() => {});
    await client.disconnect();
    if (writer) await writer.close().catch(() => {});
    await writerClient.disconnect();
    await relay.close();
    const code = await server.stop();
    fs.rmSync(statsPath, { force: true });
    assert.equal(code, 0, "uaring exits 0 on SIGTERM");
  }
}

for (const shards of [1, 2]) {
  for (const mode of MODES) {
    test(`${mode.name} on ${shards} shard${shards === 1 ? "" : "s"}: reads, writes, a subscription and a reconnect`, () => serves(mode, shards));
  }
}
