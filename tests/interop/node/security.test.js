// node-opcua-client (npm) against the real uaring binary with security: every RSA policy in
// Sign and SignAndEncrypt (read, write, browse), UserName logins (good, wrong password,
// unknown user; on a SignAndEncrypt endpoint and, encrypted with Basic256Sha256, on the None
// endpoint), a read-only user, an X.509 user token, token renewal under SignAndEncrypt, and an
// untrusted certificate accepted once copied into trusted/certs. Certificates come from
// `uaring cert generate`, password hashes from `uaring hash-password`.
"use strict";
const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const { execFileSync } = require("node:child_process");
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
  UserTokenType,
} = require("node-opcua-client");
const { OPCUACertificateManager } = require("node-opcua-certificate-manager");
const { startServer, uaringBin } = require("./server");

const BENCH = "ns=1;i=1001";
const POLICIES = [SecurityPolicy.Basic256Sha256, SecurityPolicy.Aes128_Sha256_RsaOaep, SecurityPolicy.Aes256_Sha256_RsaPss];
const MODES = [MessageSecurityMode.Sign, MessageSecurityMode.SignAndEncrypt];

let root;
let pki;
let server;
let certManager;
const ids = {};

function uaring(args, input) {
  return execFileSync(uaringBin(), args, { input, encoding: "utf8" });
}

function derToPem(der) {
  const b64 = der.toString("base64").match(/.{1,64}/g).join("\n");
  return `-----BEGIN CERTIFICATE-----\n${b64}\n-----END CERTIFICATE-----\n`;
}

function identity(name, uri) {
  const dir = path.join(root, name);
  uaring(["cert", "--pki", dir, "generate", "--uri", uri, "--name", name]);
  const der = path.join(dir, "own", "certs", "uaring.der");
  const certPem = path.join(dir, "cert.pem");
  fs.writeFileSync(certPem, derToPem(fs.readFileSync(der)));
  return { uri, der, certPem, keyPem: path.join(dir, "own", "private", "uaring.pem") };
}

before(async () => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), "uaring-node-sec-"));
  pki = path.join(root, "server-pki");
  ids.app = identity("node-client", "urn:uaring:test:node");
  ids.user = identity("node-x509-user", "urn:uaring:test:node-user");
  ids.stranger = identity("node-stranger", "urn:uaring:test:node-stranger");
  uaring(["cert", "--pki", pki, "trust", ids.app.der]);
  uaring(["cert", "--pki", pki, "trust", ids.user.der]);
  const adminHash = uaring(["hash-password"], "admin-pw\n").trim();
  const readerHash = uaring(["hash-password"], "reader-pw\n").trim();
  const cfg = path.join(root, "uaring.toml");
  fs.writeFileSync(
    cfg,
    `[security]\nrescan_interval_ms = 500\n[transport]\nmin_token_lifetime_ms = 1000\n` +
      `[[users]]\nname = "admin"\npassword = "${adminHash}"\nrole = "readwrite"\n` +
      `[[users]]\nname = "reader"\npassword = "${readerHash}"\nrole = "read"\n`,
  );
  server = await startServer(["--pki", pki, "--config", cfg]);
  certManager = new OPCUACertificateManager({
    rootFolder: path.join(root, "node-client-pki"),
    automaticallyAcceptUnknownCertificate: true,
  });
  await certManager.initialize();
});

after(async () => {
  const code = await server.stop();
  assert.equal(code, 0, "uaring must exit 0 on SIGTERM");
  fs.rmSync(root, { recursive: true, force: true });
});

function newClient(securityPolicy, securityMode, ident = ids.app, extra = {}) {
  return OPCUAClient.create({
    applicationName: "node-client",
    applicationUri: ident.uri,
    securityMode,
    securityPolicy,
    certificateFile: ident.certPem,
    privateKeyFile: ident.keyPem,
    ...extra,
    clientCertificateManager: certManager,
    endpointMustExist: false,
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
    requestedSessionTimeout: 60000,
  });
}

async function withSession(policy, mode, userIdentity, fn) {
  const client = newClient(policy, mode);
  await client.connect(server.url);
  try {
    const session = await client.createSession(userIdentity);
    try {
      await fn(session);
    } finally {
      await session.close();
    }
  } finally {
    await client.disconnect();
  }
}

async function readWriteBrowse(session, value) {
  const w = await session.write({
    nodeId: BENCH,
    attributeId: AttributeIds.Value,
    value: { value: { dataType: DataType.Int32, value } },
  });
  assert.equal(w, StatusCodes.Good);
  const r = await session.read({ nodeId: BENCH, attributeId: AttributeIds.Value });
  assert.equal(r.statusCode, StatusCodes.Good);
  assert.equal(r.value.value, value);
  const b = await session.browse("i=85");
  assert.equal(b.statusCode, StatusCodes.Good);
  assert.ok(b.references.some((ref) => ref.browseName.name === "Server"));
}

for (const policy of POLICIES) {
  for (const mode of MODES) {
    const name = `${policy.split("#")[1]} ${MessageSecurityMode[mode]}: read, write, browse`;
    test(name, async () => {
      await withSession(policy, mode, undefined, (s) => readWriteBrowse(s, 5000 + mode));
    });
  }
}

test("UserName over SignAndEncrypt: good login; wrong password and unknown user rejected", async () => {
  const policy = SecurityPolicy.Basic256Sha256;
  const mode = MessageSecurityMode.SignAndEncrypt;
  await withSession(policy, mode, { type: UserTokenType.UserName, userName: "admin", password: "admin-pw" }, (s) =>
    readWriteBrowse(s, 123),
  );
  for (const [userName, password] of [
    ["admin", "nope"],
    ["mallory", "admin-pw"],
  ]) {
    const client = newClient(SecurityPolicy.Aes256_Sha256_RsaPss, mode);
    await client.connect(server.url);
    try {
      await assert.rejects(client.createSession({ type: UserTokenType.UserName, userName, password }), /BadUserAccessDenied/);
    } finally {
      await client.disconnect();
    }
  }
});

test("UserName on the None endpoint: password RSA-encrypted (Basic256Sha256 token policy)", async () => {
  await withSession(
    SecurityPolicy.None,
    MessageSecurityMode.None,
    { type: UserTokenType.UserName, userName: "admin", password: "admin-pw" },
    (s) => readWriteBrowse(s, 321),
  );
});

test("read-only user: Write is BadUserAccessDenied, UserAccessLevel has no CurrentWrite", async () => {
  await withSession(
    SecurityPolicy.Aes128_Sha256_RsaOaep,
    MessageSecurityMode.SignAndEncrypt,
    { type: UserTokenType.UserName, userName: "reader", password: "reader-pw" },
    async (s) => {
      const w = await s.write({ nodeId: BENCH, attributeId: AttributeIds.Value, value: { value: { dataType: DataType.Int32, value: 1 } } });
      assert.equal(w, StatusCodes.BadUserAccessDenied);
      const ual = await s.read({ nodeId: BENCH, attributeId: AttributeIds.UserAccessLevel });
      assert.equal(ual.value.value & 0x02, 0);
      assert.equal(ual.value.value & 0x01, 0x01);
    },
  );
});

test("X.509 user token logs in", async () => {
  const certificateData = fs.readFileSync(ids.user.der);
  const privateKey = fs.readFileSync(ids.user.keyPem, "utf8");
  await withSession(
    SecurityPolicy.Basic256Sha256,
    MessageSecurityMode.SignAndEncrypt,
    { type: UserTokenType.Certificate, certificateData, privateKey },
    async (s) => {
      const r = await s.read({ nodeId: BENCH, attributeId: AttributeIds.Value });
      assert.equal(r.statusCode, StatusCodes.Good);
    },
  );
});

test("token renewal under SignAndEncrypt (2 s tokens, reads across several renewals)", async () => {
  const client = newClient(SecurityPolicy.Aes256_Sha256_RsaPss, MessageSecurityMode.SignAndEncrypt, ids.app, {
    defaultSecureTokenLifetime: 2000,
  });
  let renewals = 0;
  client.on("security_token_renewed", () => renewals++);
  await client.connect(server.url);
  try {
    const session = await client.createSession();
    const until = Date.now() + 5000;
    let n = 0;
    while (Date.now() < until) {
      const r = await session.read({ nodeId: BENCH, attributeId: AttributeIds.Value });
      assert.equal(r.statusCode, StatusCodes.Good);
      n++;
      await new Promise((res) => setTimeout(res, 50));
    }
    assert.ok(n > 20);
    assert.ok(renewals >= 2, `only ${renewals} renewals`);
    await session.close();
  } finally {
    await client.disconnect();
  }
});

test("untrusted client certificate: refused, then accepted once copied into trusted/certs", async () => {
  const attempt = async () => {
    const client = newClient(SecurityPolicy.Basic256Sha256, MessageSecurityMode.SignAndEncrypt, ids.stranger);
    try {
      await client.connect(server.url);
      const session = await client.createSession();
      await readWriteBrowse(session, 999);
      await session.close();
      return null;
    } catch (e) {
      return e;
    } finally {
      await client.disconnect();
    }
  };
  assert.ok(await attempt(), "an untrusted certificate must be refused");
  // node-opcua logs the ERR's BadSecurityChecksFailed but throws a generic "connection may
  // have been rejected" error; the certificate in rejected/ is what shows the cause.
  const rejected = fs.readdirSync(path.join(pki, "rejected", "certs"));
  assert.equal(rejected.length, 1);
  fs.copyFileSync(path.join(pki, "rejected", "certs", rejected[0]), path.join(pki, "trusted", "certs", rejected[0]));
  const start = Date.now();
  for (;;) {
    const err = await attempt();
    if (!err) break;
    assert.ok(Date.now() - start < 2000, `still refused after 2 s: ${err}`);
    await new Promise((res) => setTimeout(res, 200));
  }
});
