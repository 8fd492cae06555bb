// Starts the real `uaring` binary on a free port and resolves with its endpoint URL.
//
// startServer(args, { runtime: { batch_wait_us: 50 } }) adds keys to the `[runtime]` section of
// the configuration the server starts with: appended to a copy of the `--config FILE` in args
// (which must have no `[runtime]` section of its own), else in a file of their own.
"use strict";
const { spawn } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const readline = require("node:readline");

const ROOT = path.resolve(__dirname, "..", "..", "..");

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

function tomlValue(v) {
  if (typeof v === "boolean" || (typeof v === "number" && Number.isInteger(v))) return String(v);
  if (typeof v === "string") return JSON.stringify(v);
  throw new Error(`runtime value ${v}: integers, booleans and strings only`);
}

// args with `--config` naming a new file: the --config file of args (if any) followed by a
// [runtime] section with the keys of `runtime`; written beside the original so relative paths
// keep their meaning. Returns { args, file }.
function runtimeConfig(args, runtime) {
  args = [...args];
  let text = "";
  let dir = os.tmpdir();
  const i = args.indexOf("--config");
  if (i >= 0) {
    text = fs.readFileSync(args[i + 1], "utf8");
    if (text.includes("[runtime]")) throw new Error(`${args[i + 1]} has its own [runtime] section: put the keys there`);
    dir = path.dirname(args[i + 1]);
    args.splice(i, 2);
  }
  const file = path.join(dir, `uaring-runtime-${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}.toml`);
  const tail = "\n[runtime]\n" + Object.entries(runtime).map(([k, v]) => `${k} = ${tomlValue(v)}\n`).join("");
  fs.writeFileSync(file, text + tail);
  return { args: [...args, "--config", file], file };
}

function startServer(args = [], { runtime } = {}) {
  let file = null;
  if (runtime && Object.keys(runtime).length > 0) ({ args, file } = runtimeConfig(args, runtime));
  const cleanup = () => {
    if (file) fs.rmSync(file, { force: true });
    file = null;
  };
  return new Promise((resolve, reject) => {
    const proc = spawn(uaringBin(), ["serve", "--listen", "127.0.0.1:0", ...args], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    proc.once("exit", cleanup);
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

module.exports = { startServer, uaringBin, cpusArgs, sleep, waitFor };
