"""Starts the real `uaring` binary for the interop tests.

The binary is taken from $UARING_BIN, else target/release/uaring, else target/debug/uaring
(the test script builds it first). Each test module gets a fresh server on a free port.

`BATCHED_CONFIG` (tests/interop/batched.toml) is the configuration with batched waiting on.
"""
import asyncio
import contextlib
import os
import pathlib
import signal
import subprocess
import sys
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


def example_bin(name):
    """An example of the `uaring` library crate (built by `cargo test --workspace`), from
    $UARING_EXAMPLES_DIR, else target/release/examples, else target/debug/examples."""
    env = os.environ.get("UARING_EXAMPLES_DIR")
    dirs = [env] if env else [str(ROOT / "target/release/examples"), str(ROOT / "target/debug/examples")]
    for d in dirs:
        p = pathlib.Path(d) / name
        if p.exists():
            return str(p)
    pytest.fail(f"example {name} not found in {dirs}: cargo build -p uaring --examples")


class Server:
    def __init__(self, *args, command=None):
        cmd = command if command is not None else [uaring_bin(), "serve"]
        self.proc = subprocess.Popen(
            [*cmd, "--listen", "127.0.0.1:0", *args],
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
            raise RuntimeError("uaring did not print 'listening on'")

    @property
    def port(self):
        return int(self.url.rsplit(":", 1)[1])

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    code = s.stop()
    assert code == 0, f"uaring exited with {code} on SIGTERM"


BATCHED_CONFIG = str(ROOT / "tests/interop/batched.toml")


@pytest.fixture(scope="module")
def batched_server():
    """The server with batched waiting on (`[runtime] batch_wait_us = 50`), two shards (CPUs
    0-1 where the machine has them) and round-robin distribution, so consecutive connections
    land on alternating shards."""
    s = Server(*cpus_args(), "--distribution", "round-robin", "--config", BATCHED_CONFIG)
    yield s
    code = s.stop()
    assert code == 0, f"uaring exited with {code} on SIGTERM"
