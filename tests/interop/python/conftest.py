"""Starts the real `uaring` binary for the interop tests.

The binary is taken from $UARING_BIN, else target/release/uaring, else target/debug/uaring
(the test script builds it first). Each test module gets a fresh server on a free port.
"""
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def uaring_bin():
    env = os.environ.get("UARING_BIN")
    if env:
        return env
    for p in ("target/release/uaring", "target/debug/uaring"):
        if (ROOT / p).exists():
            return str(ROOT / p)
    pytest.fail("uaring binary not found: build it or set UARING_BIN")


class Server:
    def __init__(self, *args):
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
