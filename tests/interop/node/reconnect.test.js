// node-opcua-client (npm): a session survives reconnects that land on the other shard.
//
// The server runs two shards (pinned to CPUs 0-1 where the machine has them) with
// round-robin distribution, so consecutive connections alternate between the shards. The
// subscriber reaches the server through a small TCP relay in this test; 50 times the relay
// drops the connection (a network blip: both sockets destroyed, no CloseSession), a value
// is written meanwhile, and node-opcua's own reconnection opens a new secure channel,
// resumes the same session with ActivateSession and republishes what it missed. The test
// follows the NotificationMessages by sequence number (each once) and fetches a message the
// library did not recover with Republish itself: node-opcua 2.182 takes a keep-alive's
// sequence number (the *next* message's, Part 4 §7.21) as the last one received, so after a
// message was lost with the dropped connection its own Republish asks one too far. Every
// written value must arrive once and in order, the session id must stay the same, and the
// server's statistics must show the connections moving between shards.
//
// A second test moves a subscription with TransferSubscriptions to a session on the other
// shard and checks that it delivers there.
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
} = require("node-opcua-client");
const { startServer, startRelay, cpusArgs } = require("./server");

const INT32 = "ns=1;s=Demo.Static.Int32";
const CYCLES = 50;

let server;
let relay;
let statsPath;

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

async function waitFor(pred, ms = 15000, what = "condition") {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (pred()) return;
    await sleep(10);
  }
  assert.ok(pred(), `timed out waiting for ${what}`);
}

// The connections moved into a shard so far, from a statistics file the server writes
// after this SIGUSR1 (it replaces the file whole; waiting for the new one matters once the
// reconnects are quick, or the count read is an earlier one).
async function movedIn() {
  const before = fs.statSync(statsPath, { throwIfNoEntry: false })?.mtimeMs;
  server.proc.kill("SIGUSR1");
  await waitFor(() => fs.statSync(statsPath, { throwIfNoEntry: false })?.mtimeMs !== before, 5000, "a fresh statistics file");
  const doc = JSON.parse(fs.readFileSync(statsPath, "utf8"));
  return doc.shards.reduce((n, s) => n + (s.moved_in || 0), 0);
}

function newClient(extra = {}) {
  return OPCUAClient.create({
    applicationName: "uaring-interop-reconnect",
    securityMode: MessageSecurityMode.None,
    securityPolicy: SecurityPolicy.None,
    endpointMustExist: false,
    requestedSessionTimeout: 60000,
    ...extra,
  });
}

before(async () => {
  statsPath = path.join(os.tmpdir(), `uaring-stats-node-${process.pid}.json`);
  const cpus = cpusArgs();
  server = await startServer([...cpus, "--shards", "2", "--distribution", "round-robin", "--stats-file", statsPath]);
  relay = await startRelay(server.url);
});

after(async () => {
  if (relay) await relay.close();
  if (server) {
    const code = await server.stop();
    assert.equal(code, 0, "uaring exits 0 on SIGTERM");
  }
  fs.rmSync(statsPath, { force: true });
});

/**
 * Follows one subscription by sequence number: values from every NotificationMessage the
 * client library hands over (including those of its own Republish), each message once.
 * A gap — a sequence number below the next one the server announced that never arrived —
 * is fetched with Republish by `repair`.
 */
class Follower {
  constructor(session, sub) {
    this.session = session;
    this.sub = sub;
    this.messages = new Map(); // sequence number -> values
    this.highest = 0; // highest sequence number known to be used
    this.republished = 0;
    sub.on("raw_notification", (m) => this.take(m));
  }

  take(m) {
    const values = [];
    for (const nd of m.notificationData || []) {
      for (const mi of nd.monitoredItems || []) values.push(mi.value.value.value);
    }
    if (values.length) {
      this.messages.set(m.sequenceNumber, values);
      this.highest = Math.max(this.highest, m.sequenceNumber);
    } else {
      // A keep-alive carries the sequence number of the next NotificationMessage.
      this.highest = Math.max(this.highest, m.sequenceNumber - 1);
    }
  }

  values() {
    return [...this.messages.keys()].sort((a, b) => a - b).flatMap((k) => this.messages.get(k));
  }

  missing() {
    const out = [];
    const first = Math.min(...this.messages.keys());
    for (let q = first; q <= this.highest; q++) if (!this.messages.has(q)) out.push(q);
    return out;
  }

  async repair() {
    for (const q of this.missing()) {
      const r = await new Promise((resolve, reject) =>
        this.session.republish({ subscriptionId: this.sub.subscriptionId, retransmitSequenceNumber: q }, (e, x) => (e ? reject(e) : resolve(x))),
      );
      assert.equal(r.notificationMessage.sequenceNumber, q);
      this.republished++;
      this.take(r.notificationMessage);
    }
  }

  async until(v, what) {
    const end = Date.now() + 15000;
    let nextRepair = Date.now() + 300;
    while (!this.values().includes(v)) {
      assert.ok(Date.now() < end, `timed out waiting for ${what}; have ${this.values().slice(-5)}, missing ${this.missing()}`);
      if (Date.now() >= nextRepair && this.session.isReconnecting !== true) {
        await this.repair().catch(() => {});
        nextRepair = Date.now() + 300;
      }
      await sleep(10);
    }
  }
}

test("50 reconnects across shards keep the session and its subscription", async () => {
  const writerClient = newClient({ connectionStrategy: { maxRetry: 0 } });
  await writerClient.connect(server.url);
  const writer = await writerClient.createSession();
  const write = async (v) => {
    const s = await writer.write({ nodeId: INT32, attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Int32, value: v } } });
    assert.equal(s, StatusCodes.Good);
  };
  const client = newClient({ connectionStrategy: { maxRetry: 100000, initialDelay: 20, maxDelay: 100 }, keepSessionAlive: false });
  let restored = 0;
  await client.connect(relay.url);
  const session = await client.createSession();
  session.on("session_restored", () => restored++);
  const sessionId = session.sessionId.toString();
  try {
    await write(0);
    const sub = await ClientSubscription.create(session, {
      requestedPublishingInterval: 20,
      requestedLifetimeCount: 3000,
      requestedMaxKeepAliveCount: 10,
      maxNotificationsPerPublish: 0,
      publishingEnabled: true,
      priority: 1,
    });
    const f = new Follower(session, sub);
    await ClientMonitoredItem.create(
      sub,
      { nodeId: INT32, attributeId: AttributeIds.Value },
      { samplingInterval: 0, queueSize: 100, discardOldest: false },
      TimestampsToReturn.Both,
    );
    await f.until(0, "the initial value");
    const movedBefore = await movedIn();
    let v = 0;
    for (let cycle = 0; cycle < CYCLES; cycle++) {
      v++;
      await write(v);
      await f.until(v, `value ${v}`);
      const before = restored;
      relay.drop();
      v++;
      await write(v);
      await waitFor(() => restored > before, 15000, `session restored after drop ${cycle + 1}`);
      await f.until(v, `value ${v} after reconnect ${cycle + 1}`);
    }
    await f.repair();
    assert.deepEqual(f.missing(), [], "no NotificationMessage missing");
    assert.deepEqual(f.values(), Array.from({ length: v + 1 }, (_, i) => i), "every value once, in order");
    assert.equal(session.sessionId.toString(), sessionId, "the same session throughout");
    await sleep(300);
    const moves = (await movedIn()) - movedBefore;
    assert.ok(moves >= CYCLES / 2 - 1, `only ${moves} of ${CYCLES} reconnects moved to the owning shard`);
    console.log(`${CYCLES} reconnects, ${moves} moved to the other shard, ${f.republished} Republish by the test`);
    await sub.terminate();
  } finally {
    await session.close().catch(() => {});
    await client.disconnect();
    await writer.close();
    await writerClient.disconnect();
  }
});

function call(session, method, request) {
  return new Promise((resolve, reject) => session[method](request, (e, r) => (e ? reject(e) : resolve(r))));
}

test("TransferSubscriptions to a session of the other shard delivers there", async () => {
  const oldClient = newClient({ connectionStrategy: { maxRetry: 0 } });
  await oldClient.connect(server.url);
  const oldSession = await oldClient.createSession();
  const write = async (v) => {
    const s = await oldSession.write({ nodeId: INT32, attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Int32, value: v } } });
    assert.equal(s, StatusCodes.Good);
  };
  await write(2000);
  // Created with raw requests, so node-opcua's publish engine of the old session stays out.
  const cs = await call(oldSession, "createSubscription", {
    requestedPublishingInterval: 20,
    requestedLifetimeCount: 3000,
    requestedMaxKeepAliveCount: 10,
    maxNotificationsPerPublish: 0,
    publishingEnabled: true,
    priority: 1,
  });
  const subId = cs.subscriptionId;
  const cm = await call(oldSession, "createMonitoredItems", {
    subscriptionId: subId,
    timestampsToReturn: TimestampsToReturn.Both,
    itemsToCreate: [
      {
        itemToMonitor: { nodeId: INT32, attributeId: AttributeIds.Value },
        monitoringMode: 2,
        requestedParameters: { clientHandle: 11, samplingInterval: 0, queueSize: 100, discardOldest: false },
      },
    ],
  });
  assert.equal(cm.results[0].statusCode, StatusCodes.Good);
  // Sessions on further connections until one lands on the other shard (round robin).
  let newClientObj;
  let newSession;
  for (let i = 0; i < 4 && !newSession; i++) {
    const c = newClient({ connectionStrategy: { maxRetry: 0 } });
    await c.connect(server.url);
    const s = await c.createSession();
    // A session's shard is named by its authentication token (first byte, docs/Architecture.md).
    if ((s.authenticationToken.value[0] | 0) !== (subId >>> 24)) {
      newClientObj = c;
      newSession = s;
    } else {
      await s.close();
      await c.disconnect();
    }
  }
  assert.ok(newSession, "no session on the other shard");
  try {
    const tr = await call(newSession, "transferSubscriptions", { subscriptionIds: [subId], sendInitialValues: true });
    assert.equal(tr.results[0].statusCode, StatusCodes.Good);
    const values = [];
    let acks = [];
    const collect = async (want) => {
      const end = Date.now() + 15000;
      while (!values.includes(want)) {
        assert.ok(Date.now() < end, `value ${want} not delivered; got ${values}`);
        const p = await call(newSession, "publish", { subscriptionAcknowledgements: acks });
        acks = [];
        assert.equal(p.subscriptionId, subId);
        const m = p.notificationMessage;
        for (const nd of m.notificationData || []) for (const mi of nd.monitoredItems || []) values.push(mi.value.value.value);
        if ((m.notificationData || []).length) acks.push({ subscriptionId: subId, sequenceNumber: m.sequenceNumber });
      }
    };
    await collect(2000); // the initial value (SendInitialValues)
    for (let v = 2001; v <= 2020; v++) {
      await write(v);
      await collect(v);
    }
    assert.deepEqual(values.slice(-20), Array.from({ length: 20 }, (_, i) => 2001 + i));
    // The old session learns that the subscription left.
    const p = await call(oldSession, "publish", { subscriptionAcknowledgements: [] });
    const status = (p.notificationMessage.notificationData || []).find((n) => n.status !== undefined);
    assert.ok(status && status.status.equals(StatusCodes.GoodSubscriptionTransferred), `got ${JSON.stringify(p.notificationMessage)}`);
  } finally {
    await newSession.close().catch(() => {});
    await newClientObj.disconnect();
    await oldSession.close().catch(() => {});
    await oldClient.disconnect();
  }
});
