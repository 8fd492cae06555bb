// Starts the real `uaring` binary on a free port and resolves with its endpoint URL.
//
// batchedConfig (tests/interop/batched.toml) is the configuration with batched waiting on.
"use strict";
const { spawn } = require("node:child_process");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");
const readline = require("node:readline");

const ROOT = path.resolve(__dirname, "..", "..", "..");

// node-opcua waits ClientBaseImpl.retryDelay (1 s; not an option of its public API) before it
// repairs a dropped connection. The tests that drop connections on purpose (reconnect, the I/O
// modes, the gateway) test the reconnection itself, not that wait: 50 waits made the reconnect
// test take 52 s. Every test of this directory requires this module, so it is set once here.
require("node-opcua-client/dist/private/client_base_impl").ClientBaseImpl.retryDelay = 20;

function uaringBin() {
  if (process.env.UARING_BIN) return process.env.UARING_BIN;
  for (const p of ["target/release/uaring", "target/debug/uaring"]) {
    const f = path.join(ROOT, p);
    if (fs.existsSync(f)) return f;
  }
  throw new Error("uaring binary not found: build it or set UARING_BIN");
}

// Two shards pinned to CPUs 0 and 1 where the machine has two CPUs, else nothing.
function cpusArgs() {
  return os.cpus().length >= 2 ? ["--cpus", "0-1"] : [];
}

const batchedConfig = path.join(__dirname, "..", "batched.toml");

// An example of the `uaring` library crate (shards/examples/), from $UARING_EXAMPLES_DIR,
// else target/release/examples, else target/debug/examples.
function exampleBin(name) {
  const dirs = process.env.UARING_EXAMPLES_DIR
    ? [process.env.UARING_EXAMPLES_DIR]
    : [path.join(ROOT, "target/release/examples"), path.join(ROOT, "target/debug/examples")];
  for (const d of dirs) {
    const f = path.join(d, name);
    if (fs.existsSync(f)) return f;
  }
  throw new Error(`example ${name} not found in ${dirs}: cargo build -p uaring --examples`);
}

// Starts the example `name` of the library with `args` (after --listen 127.0.0.1:0).
function startExample(name, args = []) {
  return startServer(args, [exampleBin(name)]);
}

function startServer(args = [], command = null) {
  const cmd = command || [uaringBin(), "serve"];
  return new Promise((resolve, reject) => {
    const proc = spawn(cmd[0], [...cmd.slice(1), "--listen", "127.0.0.1:0", ...args], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      reject(new Error("uaring did not print 'listening on' within 30 s"));
    }, 30000);
    const rl = readline.createInterface({ input: proc.stdout });
    rl.on("line", (line) => {
      if (line.startsWith("listening on ")) {
        clearTimeout(timer);
        const url = line.slice("listening on ".length).trim();
        resolve({
          url,
          proc,
          stop: () =>
            new Promise((res) => {
              if (proc.exitCode !== null) return res(proc.exitCode);
              proc.once("exit", (code) => res(code));
              proc.kill("SIGTERM");
            }),
        });
      }
    });
    proc.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`uaring exited early with ${code}`));
    });
  });
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

// Polls `pred` every `every` ms until it holds or `ms` have passed; returns its last value.
async function waitFor(pred, ms = 10000, every = 10) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (pred()) return true;
    await sleep(every);
  }
  return pred();
}

/** A TCP relay to the server whose connections can be dropped at will. */
function startRelay(target) {
  const { hostname, port } = new URL(target.replace("opc.tcp://", "http://"));
  const pairs = new Set();
  const srv = net.createServer((c) => {
    const s = net.connect(Number(port), hostname);
    const pair = [c, s];
    pairs.add(pair);
    const end = () => {
      c.destroy();
      s.destroy();
      pairs.delete(pair);
    };
    c.on("error", end).on("close", end);
    s.on("error", end).on("close", end);
    c.pipe(s);
    s.pipe(c);
  });
  return new Promise((resolve) => {
    srv.listen(0, "127.0.0.1", () => {
      resolve({
        url: `opc.tcp://127.0.0.1:${srv.address().port}`,
        open: () => pairs.size,
        drop: () => {
          for (const [c, s] of pairs) {
            c.destroy();
            s.destroy();
          }
          pairs.clear();
        },
        close: () => new Promise((r) => srv.close(() => r())),
      });
    });
  });
}

// The hierarchical children of `nodeId` (forward, subtypes included, every result field).
async function browseChildren(session, nodeId) {
  const r = await session.browse({
    nodeId,
    browseDirection: 0, // Forward
    referenceTypeId: "HierarchicalReferences",
    includeSubtypes: true,
    resultMask: 0x3f,
  });
  return r.references || [];
}

// The NodeId of Objects/<names…> once a gateway has mirrored it (browsed again every 50 ms,
// for at most 20 s).
async function findMirrored(session, ...names) {
  const end = Date.now() + 20000;
  while (Date.now() < end) {
    let at = "ns=0;i=85";
    let ok = true;
    for (const n of names) {
      const c = (await browseChildren(session, at)).find((r) => r.browseName.name === n);
      if (!c) {
        ok = false;
        break;
      }
      at = c.nodeId.toString();
    }
    if (ok) return at;
    await sleep(50);
  }
  throw new Error(`Objects/${names.join("/")} not mirrored within 20 s`);
}

module.exports = { startServer, startExample, startRelay, exampleBin, uaringBin, cpusArgs, batchedConfig, sleep, waitFor, browseChildren, findMirrored };
