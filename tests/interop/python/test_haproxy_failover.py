"""Scale-out behind HAProxy (Debian package, TCP mode) with OPC UA non-transparent redundancy.

Two uaring instances on loopback form a warm redundant set ([redundancy] support = "warm",
each naming the other in ServerUriArray); HAProxy forwards one port to the first healthy
instance. An asyncua client subscribes through HAProxy; the instance serving it is killed;
the client reconnects through the same address, lands on the other instance and recreates its
subscription, which delivers again.

scripts/test-all.sh installs haproxy (apt-get) when it is missing.
"""
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest
from asyncua import Client, ua

from conftest import Server

URIS = ("urn:uaring:redundant:a", "urn:uaring:redundant:b")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redundant_set(tmp_path_factory):
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    assert os.path.exists(haproxy), "haproxy is not installed (scripts/test-all.sh installs the Debian package)"
    d = tmp_path_factory.mktemp("redundancy")
    servers = []
    for me, other in (URIS, URIS[::-1]):
        cfg = d / f"{me.rsplit(':', 1)[1]}.toml"
        cfg.write_text(
            f'[application]\napplication_uri = "{me}"\n'
            f'[redundancy]\nsupport = "warm"\nserver_uris = ["{other}"]\n'
        )
        servers.append(Server("--config", str(cfg), "--shards", "1", "--pki", str(d / "pki")))
    port = free_port()
    conf = d / "haproxy.cfg"
    conf.write_text(
        "global\n  maxconn 256\n"
        "defaults\n  mode tcp\n  timeout connect 1s\n  timeout client 60s\n  timeout server 60s\n"
        "  retries 3\n  option redispatch\n"
        f"frontend opcua\n  bind 127.0.0.1:{port}\n  default_backend uaring\n"
        # balance first: every client goes to the first healthy instance (warm standby).
        "backend uaring\n  balance first\n"
        f"  server a 127.0.0.1:{servers[0].port} check inter 200ms fall 1 rise 1\n"
        f"  server b 127.0.0.1:{servers[1].port} check inter 200ms fall 1 rise 1\n"
    )
    proxy = subprocess.Popen([haproxy, "-f", str(conf), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proxy.poll() is None, f"haproxy exited: {proxy.stderr.read()}"
            assert time.monotonic() < deadline, "haproxy does not accept"
            time.sleep(0.05)
    yield f"opc.tcp://127.0.0.1:{port}", servers
    proxy.terminate()
    proxy.wait(timeout=10)
    for s in servers:
        if s.alive():
            s.stop()


async def subscribe(url):
    """Connects, reads which instance answered, subscribes to Demo.Dynamic.Counter."""
    client = Client(url, timeout=5)
    await client.connect()
    ns = await client.get_namespace_array()
    received = asyncio.Queue()

    class Handler:
        def datachange_notification(self, node, val, data):
            received.put_nowait(val)

    sub = await client.create_subscription(100, Handler())
    counter = client.get_node(ua.NodeId("Demo.Dynamic.Counter", 1))
    await sub.subscribe_data_change(counter, queuesize=10, sampling_interval=50)
    return client, ns[1], received


async def next_value(received, timeout=5):
    return await asyncio.wait_for(received.get(), timeout)


def test_client_fails_over_to_the_other_instance(redundant_set):
    url, servers = redundant_set

    async def body():
        client, serving, received = await subscribe(url)
        assert serving in URIS
        await next_value(received)
        await next_value(received)
        # The redundant set as the standard describes it (Part 4 §6.6.2).
        support = await client.get_node(ua.ObjectIds.Server_ServerRedundancy_RedundancySupport).read_value()
        assert support == ua.RedundancySupport.Warm
        redundancy = client.get_node(ua.ObjectIds.Server_ServerRedundancy)
        assert await redundancy.read_type_definition() == ua.NodeId(ua.ObjectIds.NonTransparentRedundancyType)
        uris = await (await redundancy.get_child(["0:ServerUriArray"])).read_value()
        assert uris == [u for u in URIS if u != serving]
        level = await client.get_node(ua.ObjectIds.Server_ServiceLevel).read_value()
        assert 200 <= level <= 255, level

        # The serving instance dies (SIGKILL: no goodbye).
        victim = servers[URIS.index(serving)]
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(timeout=10)
        # The client notices: its session is gone with the instance (the lost connection, as
        # asyncua reports it: a closed transport or a request that times out).
        with pytest.raises((ConnectionError, asyncio.TimeoutError, ua.UaError)):
            for _ in range(100):
                await client.read_values([client.get_node(ua.ObjectIds.Server_ServerStatus_CurrentTime)])
                await asyncio.sleep(0.05)
        try:
            await client.disconnect()
        except Exception:
            pass

        # Reconnect through the same address: HAProxy sends it to the survivor, where the
        # subscription is recreated and delivers.
        t0 = time.monotonic()
        while True:
            try:
                client, now_serving, received = await subscribe(url)
                break
            except Exception:
                assert time.monotonic() - t0 < 15, "no reconnect within 15 s"
                await asyncio.sleep(0.2)
        try:
            assert now_serving != serving and now_serving in URIS
            first = await next_value(received)
            second = await next_value(received)
            assert second != first, "the recreated subscription delivers changes"
        finally:
            await client.disconnect()

    run(body())
