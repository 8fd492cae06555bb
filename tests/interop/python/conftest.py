"""Starts the real `uaring` binary for the interop tests.

The binary is taken from $UARING_BIN, else target/release/uaring, else target/debug/uaring
(the test script builds it first). Each test module gets a fresh server on a free port.

`Server(*args, runtime={...})` adds keys to the `[runtime]` section of the configuration the
server starts with (e.g. `runtime={"batch_wait_us": 50}`, batched waiting): into a copy of the
`--config FILE` given in args, else into a file of its own.
"""
import asyncio
import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]



def run(coro, timeout=60):
    """Runs one test's coroutine, failing it after `timeout` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def connected(url):
    """An asyncua client connected to `url` without security (SecurityPolicy None)."""
    from asyncua import Client

    c = Client(url, timeout=10)
    await c.connect()
    return c


@contextlib.asynccontextmanager
async def session(url):
    """`async with session(url) as c:` a connected client, disconnected at the end."""
    c = await connected(url)
    try:
        yield c
    finally:
        await c.disconnect()

def uaring_bin():
    env = os.environ.get("UARING_BIN")
    if env:
        return env
    for p in ("target/release/uaring", "target/debug/uaring"):
        if (ROOT / p).exists():
            return str(ROOT / p)
    pytest.fail("uaring binary not found: build it or set UARING_BIN")


def cpus_args():
    """Two shards pinned to CPUs 0 and 1 where the machine has two CPUs, else nothing."""
    return ["--cpus", "0-1"] if (os.cpu_count() or 1) >= 2 else []


def runtime_config(args, runtime):
    """args with `--config` naming a new file: the `--config` file args named (if any; it must
    have no `[runtime]` section of its own) followed by a `[runtime]` section with the keys of
    `runtime` (a dict of TOML integers, booleans or strings). The new file sits beside the
    original, so relative paths in it mean the same. Returns (args, path of the new file)."""
    args = list(args)
    text, where = "", None
    if "--config" in args:
        i = args.index("--config")
        orig = pathlib.Path(args[i + 1])
        text, where = orig.read_text(), orig.parent
        if "[runtime]" in text:
            raise ValueError(f"{orig} has its own [runtime] section: put the keys there")
        del args[i : i + 2]

    def toml(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    tail = "\n[runtime]\n" + "".join(f"{k} = {toml(v)}\n" for k, v in runtime.items())
    fd, path = tempfile.mkstemp(prefix="uaring-", suffix=".toml", dir=where)
    with os.fdopen(fd, "w") as f:
        f.write(text + tail)
    return [*args, "--config", path], path


class Server:
    def __init__(self, *args, runtime=None):
        self.config_path = None
        if runtime:
            args, self.config_path = runtime_config(args, runtime)
        self.proc = subprocess.Popen(
            [uaring_bin(), "serve", "--listen", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
            text=True,
        )
        self.url = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("listening on "):
                self.url = line.split("listening on ", 1)[1].strip()
                break
        if self.url is None:
            self.proc.kill()
            self.proc.wait()
            if self.config_path:
                os.unlink(self.config_path)
            raise RuntimeError("uaring did not print 'listening on'")

    @property
    def port(self):
        return int(self.url.rsplit(":", 1)[1])

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    return self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                    return None
            return self.proc.returncode
        finally:
            if self.config_path:
                os.unlink(self.config_path)
                self.config_path = None


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    code = s.stop()
    assert code == 0, f"uaring exited with {code} on SIGTERM"


BATCH_WAIT_US = 50


@pytest.fixture(scope="module")
def batched_server():
    """The server with batched waiting on (`[runtime] batch_wait_us = 50`), two shards (CPUs
    0-1 where the machine has them) and round-robin distribution, so consecutive connections
    land on alternating shards."""
    s = Server(*cpus_args(), "--distribution", "round-robin", runtime={"batch_wait_us": BATCH_WAIT_US})
    yield s
    code = s.stop()
    assert code == 0, f"uaring exited with {code} on SIGTERM"
