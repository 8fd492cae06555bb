"""asyncua (PyPI) against the real uaring binary with batched waiting on.

The server runs with `[runtime] batch_wait_us = 50` (docs/Configuration.md): a shard with nothing
left to handle waits up to 50 µs for more completions before it handles and answers them. It runs
two shards (CPUs 0-1 where the machine has them) with round-robin distribution, so a test's
second connection lands on the other shard. Every test checks the answers themselves: values,
status codes, the order of notifications, under SecurityPolicy None and under Basic256Sha256
SignAndEncrypt.
"""
import asyncio

import pytest
from asyncua import ua
from asyncua.crypto import security_policies as sp

from conftest import BATCHED_CONFIG, Server, connected, cpus_args, run, session
from test_asyncua_security import Identity, read_write_browse, secure_client, uaring

DEMO = "ns=1;s=Demo.Static."
INT32 = ua.NodeId("Demo.Static.Int32", 1)


def write_value(node, value, vtype):
    return ua.WriteValue(
        NodeId=ua.NodeId.from_string(node),
        AttributeId=ua.AttributeIds.Value,
        Value=ua.DataValue(ua.Variant(value, vtype)),
    )


def test_one_write_and_one_read_of_several_values(batched_server):
    values = {
        "Int32": (-424242, ua.VariantType.Int32),
        "Double": (6.125, ua.VariantType.Double),
        "String": ("batched", ua.VariantType.String),
        "Boolean": (True, ua.VariantType.Boolean),
        "UInt64": (2**60 + 3, ua.VariantType.UInt64),
    }

    async def body():
        async with session(batched_server.url) as c:
            # One Write request with five values and one for a node that does not exist.
            params = ua.WriteParameters()
            params.NodesToWrite = [write_value(DEMO + n, v, t) for n, (v, t) in values.items()]
            params.NodesToWrite.append(write_value("ns=1;s=Does.Not.Exist", 1, ua.VariantType.Int32))
            results = await c.uaclient.write(params)
            assert [r.value for r in results] == [ua.StatusCodes.Good] * 5 + [ua.StatusCodes.BadNodeIdUnknown]

            # One Read request for the same six nodes.
            read = ua.ReadParameters()
            read.NodesToRead = [ua.ReadValueId(NodeId=w.NodeId, AttributeId=ua.AttributeIds.Value) for w in params.NodesToWrite]
            params = read
            dvs = await c.uaclient.read(params)
            assert len(dvs) == 6
            for dv, (name, (v, t)) in zip(dvs, values.items()):
                assert dv.StatusCode.is_good(), name
                assert dv.Value.VariantType == t, name
                assert dv.Value.Value == v, name
            assert dvs[5].StatusCode.value == ua.StatusCodes.BadNodeIdUnknown

    run(body())


def test_browse_objects_and_demo_static(batched_server):
    async def body():
        async with session(batched_server.url) as c:
            names = {(await n.read_browse_name()).Name for n in await c.nodes.objects.get_children()}
            assert {"Server", "Demo", "BenchmarkValue0"} <= names
            static = await c.nodes.root.get_child(["0:Objects", "1:Demo", "1:Static"])
            children = {(await n.read_browse_name()).Name for n in await static.get_children()}
            assert {"Int32", "Double", "String", "Boolean"} <= children

    run(body())


def test_pipelined_reads_on_one_session_each_get_their_own_answer(batched_server):
    """Forty Reads in flight at once on one connection: several arrive together and are
    answered in one pass; each response must still carry its own node's value."""
    nodes = [f"ns=1;i={1001 + i}" for i in range(40)]

    async def body():
        async with session(batched_server.url) as c:
            params = ua.WriteParameters()
            params.NodesToWrite = [write_value(n, 7000 + i, ua.VariantType.Int32) for i, n in enumerate(nodes)]
            assert all(r.is_good() for r in await c.uaclient.write(params))
            got = await asyncio.gather(*(c.get_node(n).read_value() for n in nodes))
            assert got == [7000 + i for i in range(40)]

    run(body())


def test_concurrent_clients_on_both_shards_read_their_own_writes(batched_server):
    """Six sessions at once (alternating between the shards), each writing and reading back
    its own variable ten times."""

    async def worker(k):
        async with session(batched_server.url) as c:
            node = c.get_node(f"ns=1;i={1060 + k}")
            seen = []
            for i in range(10):
                await node.write_value(ua.DataValue(ua.Variant(k * 100 + i, ua.VariantType.Int32)))
                seen.append(await node.read_value())
            return seen

    async def body():
        return await asyncio.gather(*(worker(k) for k in range(6)))

    results = run(body())
    assert results == [[k * 100 + i for i in range(10)] for k in range(6)]


class Recorder:
    def __init__(self):
        self.values = []
        self.changed = asyncio.Event()

    def datachange_notification(self, node, val, data):
        self.values.append(val)
        self.changed.set()


async def written_values_arrive_in_order(subscriber, writer, base, count=15, interval=50):
    """subscriber subscribes to Demo.Static.Int32 (publishing interval `interval` ms); writer
    writes base+1 .. base+count with a pause of two intervals between writes. Returns the
    values the subscription delivered after the initial one."""
    rec = Recorder()
    node = writer.get_node(INT32)
    await node.write_value(ua.DataValue(ua.Variant(base, ua.VariantType.Int32)))
    sub = await subscriber.create_subscription(interval, rec)
    try:
        await sub.subscribe_data_change(subscriber.get_node(INT32), queuesize=count, sampling_interval=1)
        # The initial value first.
        while base not in rec.values:
            rec.changed.clear()
            await asyncio.wait_for(rec.changed.wait(), 10)
        for i in range(1, count + 1):
            await node.write_value(ua.DataValue(ua.Variant(base + i, ua.VariantType.Int32)))
            await asyncio.sleep(2 * interval / 1000)
        while not rec.values or rec.values[-1] != base + count:
            rec.changed.clear()
            await asyncio.wait_for(rec.changed.wait(), 10)
    finally:
        await sub.delete()
    return rec.values[rec.values.index(base) + 1 :]


def test_subscription_receives_every_write_of_another_session_in_order(batched_server):
    async def body():
        # Round-robin: the two connections land on different shards.
        subscriber = await connected(batched_server.url)
        writer = await connected(batched_server.url)
        try:
            got = await written_values_arrive_in_order(subscriber, writer, 50000)
            assert got == [50000 + i for i in range(1, 16)]
        finally:
            await writer.disconnect()
            await subscriber.disconnect()

    run(body())


@pytest.fixture(scope="module")
def batched_secure(tmp_path_factory):
    """The batched server (as `batched_server`) with a PKI that trusts one client certificate."""
    root = tmp_path_factory.mktemp("uaring-batched-sec")
    pki = root / "server-pki"
    client = Identity(root, "asyncua-batched", "urn:uaring:test:asyncua-batched")
    uaring("cert", "--pki", str(pki), "trust", str(client.cert))
    server = Server(
        "--pki", str(pki), *cpus_args(), "--distribution", "round-robin", "--config", BATCHED_CONFIG
    )
    yield server, client
    code = server.stop()
    assert code == 0, f"uaring exited with {code} on SIGTERM"


def test_sign_and_encrypt_read_write_browse_and_subscription(batched_secure):
    server, ident = batched_secure
    policy, mode = sp.SecurityPolicyBasic256Sha256, ua.MessageSecurityMode.SignAndEncrypt

    async def body():
        subscriber = await secure_client(server.url, ident, policy, mode)
        await subscriber.connect()
        writer = await secure_client(server.url, ident, policy, mode)
        await writer.connect()
        try:
            assert subscriber.security_policy.URI == policy.URI and writer.security_policy.URI == policy.URI
            await read_write_browse(writer, 4242)
            got = await written_values_arrive_in_order(subscriber, writer, 60000, count=10)
            assert got == [60000 + i for i in range(1, 11)]
        finally:
            await writer.disconnect()
            await subscriber.disconnect()

    run(body())
