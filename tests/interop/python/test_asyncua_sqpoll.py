"""asyncua (PyPI) against the real uaring binary with the io_uring I/O modes on.

The server runs with `[runtime] sqpoll = "per-shard"`, `sqpoll_cpu = "same"` and
`busy_poll_us = 20` (tests/interop/sqpoll.toml; docs/Configuration.md): each shard's ring has a
kernel poller thread on the shard's CPU that submits its sends and receive re-arms, and a shard
with nothing to handle spins 20 µs before it sleeps. Two shards (CPUs 0-1 where the machine has
them) with round-robin distribution, so a test's second connection lands on the other shard and
hand-offs go between SQPOLL rings; a second module-scoped server runs one shared poller for
both shards (`--sqpoll shared`). The tests check the answers themselves (values, status codes,
the order of notifications) and that the pollers are really there: `iou-sqp-*` threads of the
server process, as many as the mode says.

A third module-scoped server runs the modes that change how a send reaches the kernel instead:
fixed files (`--fixed-files`), zero-copy sends of every batch (`--zero-copy-send-min 1`) and
registered send buffers (`--fixed-send-buffers 8`, two per connection, named by index in those
zero-copy sends), on the same two shards; its statistics file shows each of them in force.
"""
import asyncio
import json
import os
import tempfile
import time

import signal

import pytest
from asyncua import ua

from conftest import Server, connected, cpus_args, run, session, ROOT
from test_asyncua_batched import written_values_arrive_in_order, write_value

SQPOLL_CONFIG = str(ROOT / "tests/interop/sqpoll.toml")
DEMO = "ns=1;s=Demo.Static."


def pollers(server):
    """The names of the server process's SQPOLL poller threads."""
    names = []
    for tid in os.listdir(f"/proc/{server.proc.pid}/task"):
        try:
            with open(f"/proc/{server.proc.pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        if name.startswith("iou-sqp-"):
            names.append(name)
    return names


def shards():
    return 2 if (os.cpu_count() or 1) >= 2 else 1


SEND_MODES = ["--fixed-files", "--zero-copy-send-min", "1", "--fixed-send-buffers", "8"]


@pytest.fixture(scope="module", params=["per-shard", "shared", "send-modes"])
def sqpoll_server(request):
    stats = tempfile.NamedTemporaryFile(prefix="uaring-io-modes-", suffix=".json", delete=False)
    stats.close()
    args = [*cpus_args(), "--shards", str(shards()), "--distribution", "round-robin", "--stats-file", stats.name]
    if request.param == "send-modes":
        args += SEND_MODES
    else:
        args += ["--config", SQPOLL_CONFIG]
    if request.param == "shared":
        args += ["--sqpoll", "shared"]
    s = Server(*args)
    s.mode = request.param
    s.stats_path = stats.name
    yield s
    code = s.stop()
    os.unlink(stats.name)
    assert code == 0, f"uaring exited with {code} on SIGTERM"


def shard_stats(server):
    """The statistics file, rewritten at once (SIGUSR1): the list of shards."""
    before = os.stat(server.stats_path).st_mtime_ns
    server.proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while os.stat(server.stats_path).st_mtime_ns == before and time.monotonic() < deadline:
        time.sleep(0.02)
    for _ in range(50):
        try:
            with open(server.stats_path) as f:
                return json.load(f)["shards"]
        except ValueError:
            time.sleep(0.02)
    raise AssertionError("no statistics file")


def test_the_pollers_are_threads_of_the_server(sqpoll_server):
    want = {"per-shard": shards(), "shared": 1, "send-modes": 0}[sqpoll_server.mode]
    assert len(pollers(sqpoll_server)) == want, pollers(sqpoll_server)


def test_one_write_and_one_read_of_several_values(sqpoll_server):
    values = {
        "Int32": (-737373, ua.VariantType.Int32),
        "Double": (2.5, ua.VariantType.Double),
        "String": ("sqpoll", ua.VariantType.String),
        "Boolean": (False, ua.VariantType.Boolean),
    }

    async def body():
        async with session(sqpoll_server.url) as c:
            params = ua.WriteParameters()
            params.NodesToWrite = [write_value(DEMO + n, v, t) for n, (v, t) in values.items()]
            params.NodesToWrite.append(write_value("ns=1;s=Does.Not.Exist", 1, ua.VariantType.Int32))
            results = await c.uaclient.write(params)
            assert [r.value for r in results] == [ua.StatusCodes.Good] * 4 + [ua.StatusCodes.BadNodeIdUnknown]
            read = ua.ReadParameters()
            read.NodesToRead = [ua.ReadValueId(NodeId=w.NodeId, AttributeId=ua.AttributeIds.Value) for w in params.NodesToWrite]
            dvs = await c.uaclient.read(read)
            assert len(dvs) == 5
            for dv, (name, (v, t)) in zip(dvs, values.items()):
                assert dv.StatusCode.is_good(), name
                assert dv.Value.VariantType == t, name
                assert dv.Value.Value == v, name
            assert dvs[4].StatusCode.value == ua.StatusCodes.BadNodeIdUnknown

    run(body())


def test_browse_objects(sqpoll_server):
    async def body():
        async with session(sqpoll_server.url) as c:
            names = {(await n.read_browse_name()).Name for n in await c.nodes.objects.get_children()}
            assert {"Server", "Demo"} <= names

    run(body())


def test_pipelined_reads_each_get_their_own_answer(sqpoll_server):
    nodes = [f"ns=1;i={1001 + i}" for i in range(40)]

    async def body():
        async with session(sqpoll_server.url) as c:
            params = ua.WriteParameters()
            params.NodesToWrite = [write_value(n, 9000 + i, ua.VariantType.Int32) for i, n in enumerate(nodes)]
            assert all(r.is_good() for r in await c.uaclient.write(params))
            got = await asyncio.gather(*(c.get_node(n).read_value() for n in nodes))
            assert got == [9000 + i for i in range(40)]

    run(body())


def test_concurrent_clients_read_their_own_writes(sqpoll_server):
    async def worker(k):
        async with session(sqpoll_server.url) as c:
            node = c.get_node(f"ns=1;i={1070 + k}")
            seen = []
            for i in range(10):
                await node.write_value(ua.DataValue(ua.Variant(k * 100 + i, ua.VariantType.Int32)))
                seen.append(await node.read_value())
            return seen

    async def body():
        return await asyncio.gather(*(worker(k) for k in range(4)))

    assert run(body()) == [[k * 100 + i for i in range(10)] for k in range(4)]


def test_subscription_receives_every_write_of_another_session_in_order(sqpoll_server):
    async def body():
        subscriber = await connected(sqpoll_server.url)
        writer = await connected(sqpoll_server.url)
        try:
            got = await written_values_arrive_in_order(subscriber, writer, 70000)
            assert got == [70000 + i for i in range(1, 16)]
        finally:
            await writer.disconnect()
            await subscriber.disconnect()

    run(body())


def test_the_send_modes_are_in_force(sqpoll_server):
    """One session per shard at once (round robin): every shard registered sockets in its
    file table, sent zero-copy and named registered send buffers, none found the region
    exhausted."""
    async def body():
        clients = [await connected(sqpoll_server.url) for _ in range(shards())]
        try:
            for c in clients:
                assert await c.get_node("ns=1;i=1001").read_value() is not None
        finally:
            for c in clients:
                await c.disconnect()

    run(body())
    st = shard_stats(sqpoll_server)
    if sqpoll_server.mode != "send-modes":
        assert all(s["fixed_send_buffers"] == 0 and s["zc_sends"] == 0 for s in st), st
        return
    for s in st:
        assert s["fixed_files"] and s["fixed_files_registered"] > 0, s
        assert s["zero_copy_send_min"] == 1 and s["zc_sends"] > 0, s
        assert s["fixed_send_buffers"] == 8 and s["fixed_buf_sends"] > 0, s
        assert s["fixed_buf_exhausted"] == 0, s
