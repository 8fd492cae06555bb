// node-opcua-client (npm) takes Reverse Connect connections from the real uaring binary
// (Part 6 §7.1.3): the client listens (ClientReverseConnect), uaring dials it from
// `--reverse-connect URL`, says ReverseHello, and the client opens its channel and session on
// the server's socket — with SecurityPolicy None, and with Basic256Sha256 SignAndEncrypt (the
// server's certificate given up front: a client that did not dial cannot ask GetEndpoints
// first). Read, write, browse and a subscription over each.
"use strict";
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { execFileSync } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const {
  OPCUAClient,
  ClientReverseConnect,
  MessageSecurityMode,
  SecurityPolicy,
  AttributeIds,
  DataType,
  StatusCodes,
  TimestampsToReturn,
} = require("node-opcua-client");
const { OPCUACertificateManager } = require("node-opcua-certificate-manager");
const { startServer, uaringBin } = require("./server");

const BENCH = "ns=1;i=1001";

let root;
let pki;
let server;
let listener;
let certManager;
let app;

function uaring(args) {
  return execFileSync(uaringBin(), args, { encoding: "utf8" });
}

function derToPem(der) {
  const b64 = der.toString("base64").match(/.{1,64}/g).join("\n");
  return `-----BEGIN CERTIFICATE-----\n${b64}\n-----END CERTIFICATE-----\n`;
}

before(async () => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), "uaring-node-reverse-"));
  pki = path.join(root, "server-pki");
  // The client's application certificate, trusted by the server.
  const dir = path.join(root, "node-client");
  uaring(["cert", "--pki", dir, "generate", "--uri", "urn:uaring:test:node-reverse", "--name", "node-reverse"]);
  const der = path.join(dir, "own", "certs", "uaring.der");
  app = {
    uri: "urn:uaring:test:node-reverse",
    certPem: path.join(dir, "cert.pem"),
    keyPem: path.join(dir, "own", "private", "uaring.pem"),
  };
  fs.writeFileSync(app.certPem, derToPem(fs.readFileSync(der)));
  uaring(["cert", "--pki", pki, "trust", der]);
  certManager = new OPCUACertificateManager({
    rootFolder: path.join(root, "node-client-pki"),
    automaticallyAcceptUnknownCertificate: true,
  });
  await certManager.initialize();
  listener = new ClientReverseConnect({ connectionUrl: "opc.tcp://127.0.0.1:0" });
  await listener.start();
  const cfg = path.join(root, "uaring.toml");
  fs.writeFileSync(
    cfg,
    `[[reverse_connect]]\nurl = "opc.tcp://127.0.0.1:${listener.listeningPort}"\n` +
      `idle_connections = 1\nretry_min_ms = 100\nretry_max_ms = 500\n`,
  );
  server = await startServer(["--pki", pki, "--config", cfg]);
});

after(async () => {
  if (listener) await listener.stop();
  const code = await server.stop();
  assert.equal(code, 0, "uaring must exit 0 on SIGTERM");
  fs.rmSync(root, { recursive: true, force: true });
});

async function overReverse(securityPolicy, securityMode, extra, fn) {
  const client = OPCUAClient.create({
    applicationName: "node-reverse",
    applicationUri: app.uri,
    securityMode,
    securityPolicy,
    certificateFile: app.certPem,
    privateKeyFile: app.keyPem,
    clientCertificateManager: certManager,
    endpointMustExist: false,
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
    requestedSessionTimeout: 60000,
    ...extra,
  });
  await client.connectReverse(listener);
  try {
    const session = await client.createSession();
    try {
      await fn(session, client);
    } finally {
      await session.close();
    }
  } finally {
    await client.disconnect();
  }
}

async function readWriteBrowseSubscribe(session, value) {
  const state = await session.read({ nodeId: "i=2259", attributeId: AttributeIds.Value });
  assert.equal(state.statusCode, StatusCodes.Good);
  assert.equal(state.value.value, 0); // Running
  const w = await session.write({
    nodeId: BENCH,
    attributeId: AttributeIds.Value,
    value: { value: { dataType: DataType.Int32, value } },
  });
  assert.equal(w, StatusCodes.Good);
  const b = await session.browse("i=85");
  assert.equal(b.statusCode, StatusCodes.Good);
  assert.ok(b.references.some((ref) => ref.browseName.name === "Server"));
  const sub = await session.createSubscription2({
    requestedPublishingInterval: 100,
    requestedMaxKeepAliveCount: 10,
    requestedLifetimeCount: 100,
    publishingEnabled: true,
  });
  const item = await sub.monitor(
    { nodeId: BENCH, attributeId: AttributeIds.Value },
    { samplingInterval: 0, queueSize: 10, discardOldest: true },
    TimestampsToReturn.Both,
  );
  const seen = new Promise((resolve) => item.on("changed", (dv) => dv.value.value === value + 1 && resolve()));
  await session.write({
    nodeId: BENCH,
    attributeId: AttributeIds.Value,
    value: { value: { dataType: DataType.Int32, value: value + 1 } },
  });
  await seen;
  await sub.terminate();
}

test("SecurityPolicy None over a reverse connection: read, write, browse, subscribe", async () => {
  await overReverse(SecurityPolicy.None, MessageSecurityMode.None, {}, (s) => readWriteBrowseSubscribe(s, 7100));
});

test("Basic256Sha256 SignAndEncrypt over a reverse connection (server certificate given up front)", async () => {
  const serverCertificate = fs.readFileSync(path.join(pki, "own", "certs", "uaring.der"));
  await overReverse(SecurityPolicy.Basic256Sha256, MessageSecurityMode.SignAndEncrypt, { serverCertificate }, (s) =>
    readWriteBrowseSubscribe(s, 7200),
  );
});
