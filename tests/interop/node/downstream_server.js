// node-opcua's server (npm node-opcua-server) as a downstream of the aggregating gateway
// (docs/Gateway.md): `node downstream_server.js PORT` listens on 127.0.0.1:PORT with
// SecurityPolicy None and anonymous logins, prints `listening PORT` once it listens, then
// serves until killed. Run by tests/interop/node/gateway_node.test.js and
// tests/interop/python/test_asyncua_gateway_node.py.
//
// Namespace urn:test:node-plant, Objects/Plant (a folder, an event notifier the Server object
// has a HasNotifier reference to) holding
// - Temperature: a Double, read-only, 21.5;
// - Setpoint: a writable Int32 (1 at start);
// - Counter: a UInt32 that counts up by 1 every 50 ms (20 Hz), exception-based
//   (MinimumSamplingInterval 0: a monitored item with sampling interval 0 sees every step);
// - Scale(Value: Double, Factor: Int32) -> Result: Double, the product;
// - Alarm(Message: String): raises a BaseEventType event from Plant (its SourceNode and
//   SourceName) with that message and Severity 700; it reaches the Server object's subscribers.
"use strict";
// node-opcua logs its warnings with console.log: to stderr, so that stdout carries only the
// ready line (and a pipe nobody reads after it never fills).
console.log = console.error;
const os = require("node:os");
const path = require("node:path");
const { OPCUAServer } = require("node-opcua-server");
const { OPCUACertificateManager } = require("node-opcua-certificate-manager");
const {
  DataType,
  Variant,
  StatusCodes,
  SecurityPolicy,
  MessageSecurityMode,
} = require("node-opcua-client");

const NS = "urn:test:node-plant";

async function main(port) {
  // The server's own certificate and trust lists, made once and kept between runs (node-opcua
  // makes a certificate at first start; a restart on the same port reuses it).
  const pki = path.join(os.tmpdir(), "uaring-node-downstream-pki");
  const server = new OPCUAServer({
    port,
    hostname: "127.0.0.1",
    alternateHostname: ["127.0.0.1"],
    securityPolicies: [SecurityPolicy.None],
    securityModes: [MessageSecurityMode.None],
    allowAnonymous: true,
    serverCertificateManager: new OPCUACertificateManager({
      automaticallyAcceptUnknownCertificate: true,
      rootFolder: path.join(pki, "server"),
    }),
    userCertificateManager: new OPCUACertificateManager({
      automaticallyAcceptUnknownCertificate: true,
      rootFolder: path.join(pki, "user"),
    }),
    serverInfo: { applicationUri: "urn:test:node-plant:server", productUri: NS },
    isAuditing: false,
  });
  await server.initialize();
  const addressSpace = server.engine.addressSpace;
  const ns = addressSpace.registerNamespace(NS);
  const objects = addressSpace.rootFolder.objects;
  const plant = ns.addFolder(objects, {
    browseName: "Plant",
    nodeId: "s=Plant",
    eventNotifier: 1, // SubscribeToEvents
  });
  objects.server.addReference({ referenceType: "HasNotifier", nodeId: plant });

  ns.addVariable({
    componentOf: plant,
    browseName: "Temperature",
    nodeId: "s=Plant.Temperature",
    dataType: "Double",
    accessLevel: "CurrentRead",
    userAccessLevel: "CurrentRead",
    value: new Variant({ dataType: DataType.Double, value: 21.5 }),
  });

  ns.addVariable({
    componentOf: plant,
    browseName: "Setpoint",
    nodeId: "s=Plant.Setpoint",
    dataType: "Int32",
    accessLevel: "CurrentRead | CurrentWrite",
    userAccessLevel: "CurrentRead | CurrentWrite",
    value: new Variant({ dataType: DataType.Int32, value: 1 }),
  });

  const counter = ns.addVariable({
    componentOf: plant,
    browseName: "Counter",
    nodeId: "s=Plant.Counter",
    dataType: "UInt32",
    accessLevel: "CurrentRead",
    userAccessLevel: "CurrentRead",
    minimumSamplingInterval: 0,
    value: new Variant({ dataType: DataType.UInt32, value: 0 }),
  });

  const scale = ns.addMethod(plant, {
    browseName: "Scale",
    nodeId: "s=Plant.Scale",
    inputArguments: [
      { name: "Value", dataType: DataType.Double, description: { text: "the value" } },
      { name: "Factor", dataType: DataType.Int32, description: { text: "the factor" } },
    ],
    outputArguments: [{ name: "Result", dataType: DataType.Double, description: { text: "Value × Factor" } }],
  });
  scale.bindMethod(async (inputs, _context) => ({
    statusCode: StatusCodes.Good,
    outputArguments: [{ dataType: DataType.Double, value: inputs[0].value * inputs[1].value }],
  }));

  const alarm = ns.addMethod(plant, {
    browseName: "Alarm",
    nodeId: "s=Plant.Alarm",
    inputArguments: [{ name: "Message", dataType: DataType.String, description: { text: "its message" } }],
    outputArguments: [],
  });
  alarm.bindMethod(async (inputs, _context) => {
    plant.raiseEvent("BaseEventType", {
      message: { dataType: DataType.LocalizedText, value: { text: inputs[0].value } },
      severity: { dataType: DataType.UInt16, value: 700 },
    });
    return { statusCode: StatusCodes.Good, outputArguments: [] };
  });

  await server.start();
  let n = 0;
  setInterval(() => {
    n += 1;
    counter.setValueFromSource(new Variant({ dataType: DataType.UInt32, value: n }));
  }, 50);
  process.stdout.write(`listening ${port}\n`);
}

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0) {
  process.stderr.write("usage: node downstream_server.js PORT\n");
  process.exit(2);
}
main(port).catch((e) => {
  process.stderr.write(`downstream_server: ${e.stack || e}\n`);
  process.exit(1);
});
