// node-opcua-client (npm) against the real uaring binary: NodeManagement. A `[[users]]` entry
// with the ConfigureAdmin role adds a folder and a Variable (AddNodes) while the server runs and
// deletes them (DeleteNodes); an Operator is refused with BadUserAccessDenied; an anonymous
// client reads the new Variable, subscribes to it and gets BadNodeIdUnknown when it goes.
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
  NodeClass,
  StatusCodes,
  UserTokenType,
  ClientSubscription,
  ClientMonitoredItem,
  TimestampsToReturn,
} = require("node-opcua-client");
// Installed with node-opcua-client (its dependency, at the version it pins).
const {
  VariableAttributes,
  ObjectAttributes,
  AddNodesRequest,
  DeleteNodesRequest,
} = require("node-opcua-types");

// node-opcua's session has no addNodes/deleteNodes: the requests go as they are.
function transact(session, request) {
  return new Promise((resolve, reject) =>
    session.performMessageTransaction(request, (err, response) => (err ? reject(err) : resolve(response))),
  );
}
async function addNodes(session, nodesToAdd) {
  return (await transact(session, new AddNodesRequest({ nodesToAdd }))).results;
}
async function deleteNodes(session, nodesToDelete) {
  return (await transact(session, new DeleteNodesRequest({ nodesToDelete }))).results;
}
const { startServer, uaringBin, sleep } = require("./server");

async function until(pred, what) {
  for (let i = 0; i < 400; i++) {
    if (await pred()) return;
    await sleep(25);
  }
  assert.fail(`timed out waiting for ${what}`);
}

let server;
let root;

function uaring(args, input) {
  return execFileSync(uaringBin(), args, { input, encoding: "utf8" });
}

before(async () => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), "uaring-node-nm-"));
  const adminHash = uaring(["hash-password"], "admin-pw\n").trim();
  const opHash = uaring(["hash-password"], "op-pw\n").trim();
  const cfg = path.join(root, "uaring.toml");
  fs.writeFileSync(
    cfg,
    `[security]\nanonymous = "read"\n` +
      `[[users]]\nname = "admin"\npassword = "${adminHash}"\nroles = ["ConfigureAdmin"]\n` +
      `[[users]]\nname = "op"\npassword = "${opHash}"\nroles = ["Operator"]\n`,
  );
  server = await startServer(["--pki", path.join(root, "pki"), "--config", cfg]);
});

after(async () => {
  const code = await server.stop();
  fs.rmSync(root, { recursive: true, force: true });
  assert.equal(code, 0, "uaring must exit 0 on SIGTERM");
});

async function session(user) {
  const client = OPCUAClient.create({
    applicationName: "uaring-interop-nm",
    securityMode: MessageSecurityMode.None,
    securityPolicy: SecurityPolicy.None,
    endpointMustExist: false,
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
  });
  await client.connect(server.url);
  const s = await client.createSession(user ? { type: UserTokenType.UserName, ...user } : undefined);
  return { client, s };
}

function folderItem(id, name) {
  return {
    parentNodeId: "i=85",
    referenceTypeId: "i=35",
    requestedNewNodeId: id,
    browseName: { namespaceIndex: 1, name },
    nodeClass: NodeClass.Object,
    nodeAttributes: new ObjectAttributes({ displayName: { text: name } }),
    typeDefinition: "i=61",
  };
}

test("AddNodes and DeleteNodes by a ConfigureAdmin user, refused to an Operator", async () => {
  const admin = await session({ userName: "admin", password: "admin-pw" });
  const op = await session({ userName: "op", password: "op-pw" });
  const watcher = await session();
  try {
    const refused = await addNodes(op.s, [folderItem("ns=1;s=OpLine", "OpLine")]);
    assert.equal(refused[0].statusCode, StatusCodes.BadUserAccessDenied);
    const added = await addNodes(admin.s, [
      folderItem("ns=1;s=NodeLine", "NodeLine"),
      {
        parentNodeId: "ns=1;s=NodeLine",
        referenceTypeId: "i=47",
        requestedNewNodeId: "ns=1;s=NodeLine.Temp",
        browseName: { namespaceIndex: 1, name: "Temp" },
        nodeClass: NodeClass.Variable,
        nodeAttributes: new VariableAttributes({
          displayName: { text: "Temp" },
          value: { dataType: DataType.Double, value: 21.5 },
          dataType: "i=11",
          valueRank: -1,
          accessLevel: 1,
          userAccessLevel: 1,
        }),
        typeDefinition: "i=63",
      },
    ]);
    assert.deepEqual(
      added.map((r) => r.statusCode),
      [StatusCodes.Good, StatusCodes.Good],
    );
    await until(async () => {
      const r = await watcher.s.read({ nodeId: "ns=1;s=NodeLine.Temp", attributeId: AttributeIds.Value });
      return r.statusCode === StatusCodes.Good && r.value.value === 21.5;
    }, "the new Variable, read by another session");
    const b = await watcher.s.browse("i=85");
    assert.ok(b.references.some((r) => r.browseName.name === "NodeLine"));

    const sub = ClientSubscription.create(watcher.s, {
      requestedPublishingInterval: 50,
      requestedMaxKeepAliveCount: 10,
      requestedLifetimeCount: 100,
      publishingEnabled: true,
    });
    const seen = [];
    const item = ClientMonitoredItem.create(
      sub,
      { nodeId: "ns=1;s=NodeLine.Temp", attributeId: AttributeIds.Value },
      { samplingInterval: 0, queueSize: 10, discardOldest: true },
      TimestampsToReturn.Both,
    );
    item.on("changed", (dv) => seen.push(dv.statusCode));
    await until(async () => seen.length >= 1, "the initial value");

    assert.equal((await deleteNodes(op.s, [{ nodeId: "ns=1;s=NodeLine", deleteTargetReferences: true }]))[0], StatusCodes.BadUserAccessDenied);
    const deleted = await deleteNodes(admin.s, [
      { nodeId: "ns=1;s=NodeLine.Temp", deleteTargetReferences: true },
      { nodeId: "ns=1;s=NodeLine", deleteTargetReferences: true },
    ]);
    assert.deepEqual(deleted, [StatusCodes.Good, StatusCodes.Good]);
    await until(async () => seen.includes(StatusCodes.BadNodeIdUnknown), "BadNodeIdUnknown on the item");
    const gone = await watcher.s.read({ nodeId: "ns=1;s=NodeLine.Temp", attributeId: AttributeIds.Value });
    assert.equal(gone.statusCode, StatusCodes.BadNodeIdUnknown);
    await sub.terminate();
  } finally {
    for (const x of [admin, op, watcher]) {
      await x.s.close();
      await x.client.disconnect();
    }
  }
});
