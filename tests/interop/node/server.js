// Starts the real `uaring` binary on a free port and resolves with its endpoint URL.
"use strict";
const { spawn } = require("node:child_process");
const fs = require("node:fs");
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

function startServer(args = []) {
  return new Promise((resolve, reject) => {
    const proc = spawn(uaringBin(), ["serve", "--listen", "127.0.0.1:0", ...args], {
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

module.exports = { startServer, uaringBin };
