"""asyncua (PyPI): the aggregating gateway (docs/Gateway.md) in front of node-opcua's server.

The downstream, started here: node-opcua's server (npm node-opcua-server,
tests/interop/node/downstream_server.js, run with `node`; `scripts/test-all.sh` installs it in
tests/interop/node/node_modules), mirrored by a `[[gateway.servers]]` entry named `np`.

An asyncua client upstream browses the mirrored tree, reads (from the cell and with maxAge 0),
writes (checked on node-opcua's server directly), calls a method with arguments, receives the
event node-opcua raises from its event notifier, subscribes to the 20 Hz counter and receives
every change; then node-opcua's server is killed (SIGKILL): the subscription reports
BadNotConnected, and after a restart on the same port the values resume without the client
doing anything.
"""
import asyncio
import pathlib
import shutil
import socket
import subprocess
import time

import pytest
from asyncua import Client, ua

from conftest import Server

HERE = pathlib.Path(__file__).resolve().parent
NODE_DIR = HERE.parent / "node"
NS = "urn:test:node-plant"
MAPPED = "urn:uaring:gateway:np:" + NS


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NodeDownstream:
    """node-opcua's server in a process of its own (so it can be killed)."""

    def __init__(self, port):
        node = shutil.which("node")
        if node is None or not (NODE_DIR / "node_modules" / "node-opcua-server").is_dir():
            pytest.fail("node and tests/interop/node/node_modules (npm install there) are needed")
        self.port = port
        self.url = f"opc.tcp://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [node, str(NODE_DIR / "downstream_server.js"), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        # Its ready line (node-opcua's own logs go to stderr), or EOF if it failed.
        line = self.proc.stdout.readline()
        if line.strip() != f"listening {port}":
            self.kill()
            raise RuntimeError(f"node-opcua's server did not start: {line!r}")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    down = NodeDownstream(free_port())
    tmp = tmp_path_factory.mktemp("gateway-node")
    cfg = tmp / "uaring.toml"
    cfg.write_text(
        f'[history]\ndir = "{tmp / "history"}"\n'
        "[gateway]\nrequest_timeout_ms = 5000\n"
        "[[gateway.servers]]\n"
        'name = "np"\n'
        f'endpoint = "{down.url}"\n'
        "reconnect_min_ms = 100\nreconnect_max_ms = 500\n"
    )
    try:
        s = Server("--config", str(cfg))
    except Exception:
        down.kill()
        raise
    s.down = down
    try:
        yield s
    finally:
        code = s.stop()
        s.down.kill()
        assert code == 0, f"uaring exited with {code} on SIGTERM"


async def until(what, f, timeout=20):
    """Polls `f()` (a coroutine) until it returns something true; fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = await f()
            if last:
                return last
        except ua.UaError as e:
            last = e
        await asyncio.sleep(0.05)
    pytest.fail(f"{what}: not within {timeout} s (last: {last!r})")


async def child(node, name):
    for c in await node.get_children():
        if (await c.read_browse_name()).Name == name:
            return c
    return None


async def mirrored(c, *path):
    """The mirrored node at Objects/np/<path…>, once the gateway has mirrored it."""

    async def find():
        n = await child(c.nodes.objects, "np")
        for p in path:
            if n is None:
                return None
            n = await child(n, p)
        return n

    return await until(f"Objects/np/{'/'.join(path)} mirrored", find)


class Changes:
    def __init__(self):
        self.values = []
        self.events = []

    def datachange_notification(self, node, val, data):
        self.values.append(data.monitored_item.Value)

    def event_notification(self, event):
        self.events.append(event)


async def read_max_age(c, node, max_age=0):
    rv = ua.ReadValueId()
    rv.NodeId = node.nodeid
    rv.AttributeId = ua.AttributeIds.Value
    p = ua.ReadParameters()
    p.MaxAge = max_age
    p.NodesToRead = [rv]
    p.TimestampsToReturn = ua.TimestampsToReturn.Both
    (dv,) = await c.uaclient.read(p)
    return dv


def test_node_opcuas_tree_is_browsed_read_written_and_called(gateway):
    async def go():
        async with Client(gateway.url, timeout=10) as c:
            plant = await mirrored(c, "Plant")
            ns = await c.get_namespace_array()
            # node-opcua's own namespace is mapped to one of the gateway's; the identifiers kept.
            assert MAPPED in ns and NS not in ns, ns
            assert plant.nodeid == ua.NodeId("Plant", ns.index(MAPPED))
            assert await plant.read_node_class() == ua.NodeClass.Object
            names = {(await n.read_browse_name()).Name for n in await plant.get_children()}
            assert names == {"Temperature", "Setpoint", "Counter", "Scale", "Alarm"}, names

            # Reads: from the cell (maxAge an hour: the value read when it was mirrored), and
            # with maxAge 0 (forwarded to node-opcua).
            temp = await child(plant, "Temperature")
            dv = await read_max_age(c, temp, 3_600_000)
            assert dv.StatusCode.is_good()
            assert dv.Value == ua.Variant(21.5, ua.VariantType.Double)
            fresh = await read_max_age(c, temp)
            assert fresh.StatusCode.is_good() and fresh.Value.Value == 21.5, fresh
            counter = await child(plant, "Counter")
            assert await counter.read_data_type() == ua.NodeId(ua.ObjectIds.UInt32)
            first = await read_max_age(c, counter)
            assert first.StatusCode.is_good()
            assert first.Value.VariantType == ua.VariantType.UInt32 and first.Value.Value >= 1

            # A Write goes to node-opcua's server: seen there directly.
            setpoint = await child(plant, "Setpoint")
            await setpoint.write_value(ua.DataValue(ua.Variant(4242, ua.VariantType.Int32)))
            async with Client(gateway.down.url, timeout=10) as d:
                idx = await d.get_namespace_index(NS)
                direct = d.get_node(ua.NodeId("Plant.Setpoint", idx))
                assert await direct.read_value() == 4242
            assert (await read_max_age(c, setpoint)).Value.Value == 4242
            # A Variable node-opcua keeps read-only is not writable here either.
            level = (await temp.read_attribute(ua.AttributeIds.AccessLevel)).Value.Value
            assert level & ua.AccessLevel.CurrentRead.mask and not level & ua.AccessLevel.CurrentWrite.mask
            with pytest.raises(ua.UaStatusCodeError) as e:
                await temp.write_value(ua.DataValue(ua.Variant(1.0, ua.VariantType.Double)))
            assert e.value.code == ua.StatusCodes.BadNotWritable

            # A Call is forwarded: its arguments (as node-opcua declares them) and its output.
            scale = await child(plant, "Scale")
            inputs = await (await child(scale, "InputArguments")).read_value()
            assert [(a.Name, a.DataType) for a in inputs] == [
                ("Value", ua.NodeId(ua.ObjectIds.Double)),
                ("Factor", ua.NodeId(ua.ObjectIds.Int32)),
            ]
            out = await plant.call_method(
                scale, ua.Variant(2.5, ua.VariantType.Double), ua.Variant(4, ua.VariantType.Int32)
            )
            assert out == 10.0

            # The event node-opcua raises from Plant (an event notifier) is passed on with the
            # mirrored Plant as its source, to subscribers of the Server object here.
            h = Changes()
            sub = await c.create_subscription(50, h)
            await sub.subscribe_events(c.nodes.server)
            await plant.call_method(
                await child(plant, "Alarm"), ua.Variant("too hot", ua.VariantType.String)
            )

            async def got_event():
                return [e for e in h.events if e.Message.Text == "too hot"]

            (ev,) = await until("node-opcua's event", got_event)
            assert ev.Severity == 700
            assert ev.SourceName == "Plant"
            assert ev.SourceNode == plant.nodeid
            assert ev.EventType == ua.NodeId(ua.ObjectIds.BaseEventType)
            await sub.delete()

    run(go())


def test_every_change_then_bad_not_connected_and_resume(gateway):
    async def go():
        async with Client(gateway.url, timeout=10) as c:
            counter = await mirrored(c, "Plant", "Counter")
            state = await mirrored(c, "State")
            reconnects = await mirrored(c, "Reconnects")
            setpoint = await mirrored(c, "Plant", "Setpoint")
            h = Changes()
            sub = await c.create_subscription(50, h)
            # Exception-based with a queue: every step of node-opcua's 20 Hz counter arrives.
            await sub.subscribe_data_change(counter, queuesize=100, sampling_interval=0)

            def good():
                return [v.Value.Value for v in h.values if v.StatusCode.is_good()]

            async def forty():
                return len(good()) >= 40

            await until("40 changes", forty)
            values = good()
            # The first is the mirrored cell as it was; every one after it is the next count.
            steps = [b - a for a, b in zip(values[1:], values[2:])]
            assert len(steps) >= 38 and all(s == 1 for s in steps), values

            gateway.down.kill()

            async def bad():
                return any(v.StatusCode.value == ua.StatusCodes.BadNotConnected for v in h.values)

            await until("BadNotConnected on the subscription", bad)
            dv = await counter.read_data_value(raise_on_bad_status=False)
            assert dv.StatusCode.value == ua.StatusCodes.BadNotConnected
            with pytest.raises(ua.UaStatusCodeError) as e:
                await setpoint.write_value(ua.DataValue(ua.Variant(7, ua.VariantType.Int32)))
            assert e.value.code == ua.StatusCodes.BadNotConnected
            assert await state.read_value() != "connected"
            n = len(h.values)
            gateway.down = NodeDownstream(gateway.down.port)

            # node-opcua's new instance counts from 1 again: the values resume on the same
            # subscription, every step of them.
            async def resumed():
                vs = [v.Value.Value for v in h.values[n:] if v.StatusCode.is_good()]
                return vs if len(vs) >= 10 else None

            after = await until("values again after the restart", resumed, timeout=40)
            steps = [b - a for a, b in zip(after[1:], after[2:])]
            assert all(s == 1 for s in steps), after
            assert await state.read_value() == "connected"
            assert await reconnects.read_value() >= 1
            await sub.delete()

    run(go())
