"""asyncua (PyPI): the aggregating gateway (docs/Gateway.md) in front of two real servers.

The downstream servers, started here:
- asyncua's server (gateway_downstream.py), mirrored by `uaring serve --gateway URL` (the
  quick start: named after its host and port);
- open62541's native server (`open62541-plant`, harness/peers/open62541), mirrored by a
  `[[gateway.servers]]` entry named `o6`.

An asyncua client upstream browses both mirrored trees, reads (from the mirrored cell and
with maxAge 0, forwarded), writes (checked on the downstream server directly), calls a
method, receives an event the downstream raises, subscribes and receives every change; then
the asyncua downstream is killed (SIGKILL): the upstream subscription reports
BadNotConnected, and after a restart on the same port the values resume without the client
doing anything.
"""
import asyncio
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest
from asyncua import Client, ua
from asyncua.common.events import Event, get_filter_from_event_type

from conftest import ROOT, Server, example_bin

HERE = pathlib.Path(__file__).resolve().parent
PLANT_URI = "urn:test:plant"
O6_URI = "urn:uaring:example:plant"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def peer_bin(name):
    for p in ("target/release", "target/debug"):
        f = ROOT / p / name
        if f.exists():
            return str(f)
    pytest.fail(f"{name} not found: cargo build -p uaring-peer-open62541")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Downstream:
    """asyncua's server in a process of its own (so it can be killed)."""

    def __init__(self, port=0):
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "gateway_downstream.py"), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line.startswith("listening "):
            self.kill()
            raise RuntimeError(f"the downstream did not start: {line!r}")
        self.port = int(line.split()[1])
        # When the History node's values begin (gateway_downstream.py).
        self.history_start = datetime.fromisoformat(line.split()[2])
        self.url = f"opc.tcp://127.0.0.1:{self.port}"

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class Plant:
    """open62541's native server: Doubles s=Plant.V0..V2 pushed 20 times a second."""

    def __init__(self):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [peer_bin("open62541-plant"), "--listen", f"127.0.0.1:{self.port}",
             "--variables", "3", "--rate", "20", "--log-level", "6"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        # open62541 logs to stdout too: up to its line.
        for _ in range(200):
            line = self.proc.stdout.readline()
            if not line or line.startswith("listening on "):
                break
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError("open62541-plant did not start")
        self.url = f"opc.tcp://127.0.0.1:{self.port}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    down = Downstream()
    try:
        plant = Plant()
    except Exception:
        down.kill()
        raise
    tmp = tmp_path_factory.mktemp("gateway")
    # uaring itself downstream: its Demo folder (historized Variables, an alarm, Demo.Events
    # keeping its events), its history store in a directory of its own.
    ucfg = tmp / "downstream.toml"
    ucfg.write_text(
        f'[history]\ndir = "{tmp / "down-history"}"\nevent_notifiers = ["ns=1;s=Demo.Events"]\n'
    )
    try:
        udown = Server("--config", str(ucfg))
    except Exception:
        down.kill()
        plant.stop()
        raise
    try:
        # The library's plant example: an alarm (Plant.HighSetpoint) driven by Setpoint.
        pex = Server(command=[example_bin("plant"), "--variables", "1"])
    except Exception:
        down.kill()
        plant.stop()
        udown.stop()
        raise
    cfg = tmp / "uaring.toml"
    cfg.write_text(
        f'[history]\ndir = "{tmp / "history"}"\n'
        "[gateway]\nrequest_timeout_ms = 5000\n"
        "[[gateway.servers]]\n"
        'name = "o6"\n'
        f'endpoint = "{plant.url}"\n'
        "reconnect_min_ms = 100\nreconnect_max_ms = 500\n"
        "[[gateway.servers]]\n"
        'name = "u"\n'
        f'endpoint = "{udown.url}"\n'
        'mirror = ["nsu=urn:uaring:server;s=Demo"]\n'
        "history_updates = true\n"
        'monitor = ["nsu=urn:uaring:server;s=Demo.Dynamic.Counter", "/1:Demo/1:Dynamic/1:Sine"]\n'
        "monitor_sampling_interval_ms = 100\n"
        "[[gateway.servers]]\n"
        'name = "p"\n'
        f'endpoint = "{pex.url}"\n'
        'mirror = ["nsu=urn:uaring:example:plant;s=Plant"]\n'
    )
    s = Server("--gateway", down.url, "--config", str(cfg))
    s.down = down
    s.plant = plant
    s.udown = udown
    s.pex = pex
    s.down_name = f"127.0.0.1_{down.port}"
    try:
        yield s
    finally:
        code = s.stop()
        s.down.kill()
        plant.stop()
        ucode = udown.stop()
        pex.stop()
        assert code == 0, f"uaring exited with {code} on SIGTERM"
        assert ucode == 0, f"the downstream uaring exited with {ucode} on SIGTERM"


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


async def mirrored(c, server, *path):
    """The mirrored node at Objects/<server>/<path…>, once the gateway has mirrored it."""

    async def find():
        n = await child(c.nodes.objects, server)
        for p in path:
            if n is None:
                return None
            n = await child(n, p)
        return n

    return await until(f"Objects/{server}/{'/'.join(path)} mirrored", find)


class Changes:
    def __init__(self):
        self.values = []
        self.events = []

    def datachange_notification(self, node, val, data):
        self.values.append(data.monitored_item.Value)

    def event_notification(self, event):
        self.events.append(event)


def test_the_mirrored_trees_are_browsed_read_written_and_called(gateway):
    async def go():
        async with Client(gateway.url, timeout=10) as c:
            line = await mirrored(c, gateway.down_name, "Line1")
            ns = await c.get_namespace_array()
            # The downstream's own namespace is mapped to one of the gateway's.
            mapped = [u for u in ns if u.endswith(":" + PLANT_URI)]
            assert len(mapped) == 1 and mapped[0] != PLANT_URI, ns
            assert line.nodeid.NamespaceIndex == ns.index(mapped[0])
            names = {(await n.read_browse_name()).Name for n in await line.get_children()}
            assert {"Counter", "Setpoint", "Add", "Alarm"} <= names, names

            counter = await child(line, "Counter")
            assert await counter.read_node_class() == ua.NodeClass.Variable
            # Read from the cell (whatever maxAge the client lets it be) and with maxAge 0
            # (forwarded to the downstream): both good Doubles, the forwarded one no older.
            first = await counter.read_data_value()
            assert first.StatusCode.is_good() and isinstance(first.Value.Value, float)
            rv = ua.ReadValueId()
            rv.NodeId = counter.nodeid
            rv.AttributeId = ua.AttributeIds.Value
            p = ua.ReadParameters()
            p.MaxAge = 0
            p.NodesToRead = [rv]
            p.TimestampsToReturn = ua.TimestampsToReturn.Both
            (fresh,) = await c.uaclient.read(p)
            assert fresh.StatusCode.is_good(), fresh
            assert fresh.Value.Value >= first.Value.Value

            # A Write goes to the downstream server: seen there directly.
            setpoint = await child(line, "Setpoint")
            await setpoint.write_value(ua.DataValue(ua.Variant(4242, ua.VariantType.Int32)))
            async with Client(gateway.down.url, timeout=10) as d:
                idx = await d.get_namespace_index(PLANT_URI)
                direct = d.get_node(ua.NodeId(0, idx))
                dline = await child(d.nodes.objects, "Line1")
                direct = await child(dline, "Setpoint")
                assert await direct.read_value() == 4242
            assert await setpoint.read_value() == 4242
            # A Write the downstream refuses keeps its status.
            with pytest.raises(ua.UaStatusCodeError) as e:
                await counter.write_value(ua.DataValue(ua.Variant("text", ua.VariantType.String)))
            assert e.value.code != 0

            # A Call is forwarded, arguments and outputs translated.
            add = await child(line, "Add")
            out = await line.call_method(
                add, ua.Variant(40, ua.VariantType.Int32), ua.Variant(2, ua.VariantType.Int32)
            )
            assert out == 42

            # An event the downstream raises is passed on (here its source is the mirror's
            # folder, under the Server object's notifiers).
            h = Changes()
            sub = await c.create_subscription(50, h)
            await sub.subscribe_events(c.nodes.server)
            await line.call_method(
                await child(line, "Alarm"), ua.Variant("too hot", ua.VariantType.String)
            )

            async def got_event():
                return [e for e in h.events if e.Message.Text == "too hot"]

            (ev,) = await until("the downstream's event", got_event)
            assert ev.Severity == 500
            await sub.delete()

    run(go())


def test_a_subscription_receives_every_change(gateway):
    async def go():
        async with Client(gateway.url, timeout=10) as c:
            counter = await mirrored(c, gateway.down_name, "Line1", "Counter")
            h = Changes()
            sub = await c.create_subscription(50, h)
            # Exception-based (sampling interval 0) with a queue: every value of the
            # downstream's 20 Hz counter arrives, none merged (a sampled item would see the
            # newest of each of the gateway's downstream publishes: docs/Gateway.md).
            await sub.subscribe_data_change(counter, queuesize=100, sampling_interval=0)

            async def twenty():
                return len(h.values) >= 20

            await until("20 changes", twenty)
            values = [v.Value.Value for v in h.values if v.StatusCode.is_good()]
            steps = [b - a for a, b in zip(values[1:], values[2:])]
            assert steps and all(s == 1 for s in steps), values

            # A second client's item on the node shares the one downstream item.
            items = await mirrored(c, gateway.down_name, "MonitoredItems")
            async with Client(gateway.url, timeout=10) as c2:
                h2 = Changes()
                sub2 = await c2.create_subscription(50, h2)
                await sub2.subscribe_data_change(
                    c2.get_node(counter.nodeid), queuesize=10, sampling_interval=0
                )

                async def both():
                    return len(h2.values) >= 3

                await until("the second client's changes", both)
                assert await items.read_value() == 1
                await sub2.delete()
            await sub.delete()

            async def none():
                return await items.read_value() == 0

            await until("the downstream item gone with the last upstream item", none)

            # No longer kept current: a new item starts from the last value marked
            # UncertainLastUsableValue, then the server's new item brings good values.
            h3 = Changes()
            sub3 = await c.create_subscription(50, h3)
            await sub3.subscribe_data_change(counter, queuesize=10, sampling_interval=0)

            async def good_again():
                return any(v.StatusCode.is_good() for v in h3.values)

            await until("good values from the new downstream item", good_again)
            assert h3.values[0].StatusCode.value == ua.StatusCodes.UncertainLastUsableValue
            await sub3.delete()

    run(go())


def test_the_open62541_server_is_mirrored_from_the_configuration(gateway):
    async def go():
        async with Client(gateway.url, timeout=10) as c:
            v0 = await mirrored(c, "o6", "Plant", "V0")
            ns = await c.get_namespace_array()
            assert any(u.endswith(":" + O6_URI) for u in ns), ns
            h = Changes()
            sub = await c.create_subscription(50, h)
            await sub.subscribe_data_change(v0, queuesize=100)

            async def rising():
                good = [v.Value.Value for v in h.values if v.StatusCode.is_good()]
                return len(good) >= 10 and good[-1] > good[0]

            await until("open62541's values through the gateway", rising)
            state = await mirrored(c, "o6", "State")
            assert await state.read_value() == "connected"
            await sub.delete()

    run(go())


def test_a_reload_starts_the_gateway_and_replaces_the_mirrored_servers(gateway, tmp_path):
    """A server started without [[gateway.servers]]: the first SIGHUP with an entry starts the
    gateway (without HistoryRead forwarding: the History Variable shows none); the next
    re-reads the list: a removed entry's nodes go, a new one is mirrored."""
    cfg = tmp_path / "reload.toml"
    cfg.write_text(f'[history]\ndir = "{tmp_path / "history"}"\n')
    entry = '[[gateway.servers]]\nname = "{}"\nendpoint = "' + gateway.down.url + '"\n'
    s = Server("--config", str(cfg))
    try:

        async def go():
            async with Client(s.url, timeout=10) as c:
                assert await child(c.nodes.objects, "before") is None
                cfg.write_text(entry.format("before"))
                s.proc.send_signal(signal.SIGHUP)
                await mirrored(c, "before", "Line1", "Counter")
                history = await mirrored(c, "before", "Line1", "History")
                level = (await history.read_attribute(ua.AttributeIds.AccessLevel)).Value.Value
                assert level & ua.AccessLevel.CurrentRead.mask, level
                assert not level & ua.AccessLevel.HistoryRead.mask, level
                journal = await mirrored(c, "before", "Line1", "Journal")
                notifier = await journal.read_event_notifier()
                assert ua.EventNotifier.SubscribeToEvents in notifier, notifier
                assert ua.EventNotifier.HistoryRead not in notifier, notifier
                cfg.write_text(entry.format("after"))
                s.proc.send_signal(signal.SIGHUP)
                await mirrored(c, "after", "Line1", "Counter")

                async def gone():
                    return await child(c.nodes.objects, "before") is None

                await until("the removed server's folder gone", gone)

        run(go())
    finally:
        assert s.stop() == 0


def test_a_killed_downstream_reads_bad_not_connected_and_resumes(gateway):
    async def go():
        async with Client(gateway.url, timeout=10) as c:
            counter = await mirrored(c, gateway.down_name, "Line1", "Counter")
            journal = await mirrored(c, gateway.down_name, "Line1", "Journal")
            state = await mirrored(c, gateway.down_name, "State")
            reconnects = await mirrored(c, gateway.down_name, "Reconnects")
            h = Changes()
            sub = await c.create_subscription(50, h)
            await sub.subscribe_data_change(counter, queuesize=100)

            async def good():
                return any(v.StatusCode.is_good() for v in h.values)

            await until("a value before the kill", good)
            gateway.down.kill()

            async def bad():
                return any(
                    v.StatusCode.value == ua.StatusCodes.BadNotConnected for v in h.values
                )

            await until("BadNotConnected on the subscription", bad)
            # Reads say the same, and Writes and Calls are refused likewise.
            assert (await counter.read_data_value(raise_on_bad_status=False)).StatusCode.value \
                == ua.StatusCodes.BadNotConnected
            # So is an event history read of a mirrored notifier.
            now = datetime.now(timezone.utc)
            details = ua.ReadEventDetails(
                StartTime=now - timedelta(hours=1),
                EndTime=now,
                Filter=await get_filter_from_event_type(
                    [c.get_node(ua.NodeId(ua.ObjectIds.BaseEventType))]
                ),
            )
            r = await journal.history_read_events(details)
            assert r.StatusCode.value == ua.StatusCodes.BadNotConnected, r
            assert await state.read_value() != "connected"
            n = len(h.values)
            gateway.down = Downstream(gateway.down.port)

            async def resumed():
                return any(v.StatusCode.is_good() for v in h.values[n:])

            await until("values again after the restart", resumed, timeout=40)
            assert await state.read_value() == "connected"
            assert await reconnects.read_value() >= 1

    run(go())


def test_history_reads_are_forwarded_with_their_continuation_points(gateway):
    """HistoryRead of a mirrored Variable whose server keeps its history goes to the server;
    its continuation points come back wrapped and are honoured; a Variable without history
    shows no HistoryRead in its AccessLevel here."""

    async def go():
        async with Client(gateway.url, timeout=10) as c:
            node = await mirrored(c, gateway.down_name, "Line1", "History")
            setpoint = await mirrored(c, gateway.down_name, "Line1", "Setpoint")
            level = await node.read_attribute(ua.AttributeIds.AccessLevel)
            assert level.Value.Value & ua.AccessLevel.HistoryRead.mask, level
            assert (await node.read_attribute(ua.AttributeIds.Historizing)).Value.Value is True
            plain = (await setpoint.read_attribute(ua.AttributeIds.AccessLevel)).Value.Value
            assert not plain & ua.AccessLevel.HistoryRead.mask, plain
            start = gateway.down.history_start

            # Raw: ten values, four per answer downstream: asyncua's client follows the
            # continuation points (three reads through the gateway).
            values = await node.read_raw_history(
                start - timedelta(seconds=1), start + timedelta(seconds=20), return_bounds=False
            )
            assert [v.Value.Value for v in values] == [float(i) for i in range(10)], values
            assert values[3].SourceTimestamp.replace(tzinfo=timezone.utc) == start + timedelta(
                seconds=3
            )

            # A continuation point of another request (other details) is refused here.
            details = ua.ReadRawModifiedDetails(
                IsReadModified=False,
                StartTime=start,
                EndTime=start + timedelta(seconds=20),
                NumValuesPerNode=0,
                ReturnBounds=False,
            )
            first = await node.history_read(details)
            assert first.StatusCode.is_good() and first.ContinuationPoint, first
            assert [v.Value.Value for v in first.HistoryData.DataValues] == [0.0, 1.0, 2.0, 3.0]
            details.EndTime = start + timedelta(seconds=30)
            other = await node.history_read(details, first.ContinuationPoint)
            assert other.StatusCode.value == ua.StatusCodes.BadContinuationPointInvalid

            # The server's own refusal comes back: asyncua's store has no processed reads.
            processed = ua.ReadProcessedDetails(
                StartTime=start,
                EndTime=start + timedelta(seconds=10),
                ProcessingInterval=5000.0,
                AggregateType=[ua.NodeId(ua.ObjectIds.AggregateFunction_Average)],
            )
            r = await node.history_read(processed)
            assert r.StatusCode.value == ua.StatusCodes.BadNotImplemented, r

            # A Variable without HistoryRead: refused here, not asked downstream.
            r = await setpoint.history_read(details)
            assert r.StatusCode.value == ua.StatusCodes.BadNotReadable, r

    run(go())


def event_read(node, details, point=None, release=False):
    """One HistoryRead of `node`'s events (asyncua's HistoryReadParameters releases
    continuation points unless told not to)."""
    p = ua.HistoryReadParameters(
        HistoryReadDetails=details,
        TimestampsToReturn=ua.TimestampsToReturn.Both,
        ReleaseContinuationPoints=release,
        NodesToRead=[ua.HistoryReadValueId(NodeId=node.nodeid, ContinuationPoint=point)],
    )
    return node.session.history_read(p)


async def event_history(node, start, end, per_read, evfilter):
    """Every event of `node` from `start` to `end`, `per_read` an answer, following the
    continuation points: (the events, how many reads it took)."""
    details = ua.ReadEventDetails(
        StartTime=start, EndTime=end, NumValuesPerNode=per_read, Filter=evfilter
    )
    events, point, reads = [], None, 0
    while True:
        (r,) = await event_read(node, details, point)
        reads += 1
        r.StatusCode.check()
        events += [
            Event.from_event_fields(evfilter.SelectClauses, e.EventFields)
            for e in r.HistoryData.Events
        ]
        point = r.ContinuationPoint
        if not point:
            return events, reads
        assert reads < 10, "a continuation point too many"


def test_event_history_of_a_mirrored_notifier_is_forwarded(gateway):
    """asyncua's Journal (its events historized, four an answer): its mirror shows HistoryRead
    in its EventNotifier, and HistoryRead of its events through the gateway gives what the
    server keeps (message, severity, time; the mirrored Journal as the source; EventIds
    behind the gateway's tag), the filter built here translated on the way (a where clause
    naming the mirrored Journal chooses there; one naming the gateway's own namespace
    nothing), reads followed through the server's continuation points, a point released;
    a notifier the server keeps no events of gets the server's status; HistoryUpdate of
    events is refused here."""

    async def go():
        async with Client(gateway.url, timeout=10) as c, Client(
            gateway.down.url, timeout=10
        ) as d:
            journal = await mirrored(c, gateway.down_name, "Line1", "Journal")
            notifier = await journal.read_event_notifier()
            assert ua.EventNotifier.HistoryRead in notifier, notifier
            assert ua.EventNotifier.HistoryWrite not in notifier, notifier
            idx = await d.get_namespace_index(PLANT_URI)
            there = await (await child(d.nodes.objects, "Line1")).get_child(f"{idx}:Journal")
            log = await there.get_child(f"{idx}:Log")
            start = datetime.now(timezone.utc) - timedelta(seconds=1)
            for i in range(10):
                await there.call_method(
                    log,
                    ua.Variant(f"journal {i}", ua.VariantType.String),
                    ua.Variant(100 + 100 * i, ua.VariantType.UInt16),
                )
            end = datetime.now(timezone.utc) + timedelta(seconds=1)
            base = ua.NodeId(ua.ObjectIds.BaseEventType)
            filter_there = await get_filter_from_event_type([d.get_node(base)])
            filter_here = await get_filter_from_event_type([c.get_node(base)])

            async def ten():
                evs, _ = await event_history(there, start, end, 0, filter_there)
                return evs if len(evs) == 10 else None

            # The server stores its events through a subscription of its own: soon.
            direct = await until("ten events in the downstream's history", ten)
            assert [e.Message.Text for e in direct] == [f"journal {i}" for i in range(10)]

            # Five an answer asked here, four an answer there: the second and third reads go
            # on from the server's continuation points.
            here, reads = await event_history(journal, start, end, 5, filter_here)
            assert reads == 3, reads
            assert [(e.Message.Text, e.Severity, e.Time) for e in here] == [
                (e.Message.Text, e.Severity, e.Time) for e in direct
            ]
            assert [e.Severity for e in here] == [100 + 100 * i for i in range(10)]
            for h, t in zip(here, direct):
                assert h.SourceNode == journal.nodeid, h.SourceNode
                assert h.SourceName == "Journal"
                assert h.EventType == base
                assert h.EventId != t.EventId and h.EventId.endswith(t.EventId)
                assert h.ReceiveTime == t.ReceiveTime

            # asyncua's own call (it reads one answer: four events).
            first = await journal.read_event_history(start, end)
            assert [e.Message.Text for e in first] == [f"journal {i}" for i in range(4)]

            # A where clause built here: the mirrored Journal as SourceNode (a NodeId of the
            # gateway's instance namespace: the server sees its own) and Severity >= 300.
            where = ua.ContentFilter()
            for op, operands in (
                (ua.FilterOperator.And, [ua.ElementOperand(1), ua.ElementOperand(2)]),
                (ua.FilterOperator.Equals, [field("SourceNode"), literal(journal.nodeid)]),
                (
                    ua.FilterOperator.GreaterThanOrEqual,
                    [field("Severity"), literal(ua.Variant(300, ua.VariantType.UInt16))],
                ),
            ):
                where.Elements.append(
                    ua.ContentFilterElement(FilterOperator=op, FilterOperands=operands)
                )
            filtered = ua.EventFilter(SelectClauses=filter_here.SelectClauses, WhereClause=where)
            # (Five an answer: asyncua's store gives no continuation point when
            # numValuesPerNode, not its own page of four, ends an answer.)
            chosen, reads = await event_history(journal, start, end, 5, filtered)
            assert [e.Message.Text for e in chosen] == [f"journal {i}" for i in range(2, 10)]
            assert reads == 2, reads
            # A NodeId of the gateway's own namespace (the server's folder here): nothing.
            folder = await child(c.nodes.objects, gateway.down_name)
            where.Elements[1].FilterOperands[1] = literal(folder.nodeid)
            none, _ = await event_history(journal, start, end, 5, filtered)
            assert none == [], none

            # releaseContinuationPoints: the point is released (Good, nothing read), and is
            # no continuation point afterwards.
            details = ua.ReadEventDetails(
                StartTime=start, EndTime=end, NumValuesPerNode=0, Filter=filter_here
            )
            (r,) = await event_read(journal, details)
            assert r.StatusCode.is_good() and r.ContinuationPoint, r
            point = r.ContinuationPoint
            (released,) = await event_read(journal, details, point, release=True)
            assert released.StatusCode.is_good(), released
            assert not released.HistoryData or not released.HistoryData.Events, released
            (again,) = await event_read(journal, details, point)
            assert again.StatusCode.value == ua.StatusCodes.BadContinuationPointInvalid, again

            # A notifier whose server keeps no events for it: the server's own status.
            ledger = await mirrored(c, gateway.down_name, "Line1", "Ledger")
            assert ua.EventNotifier.HistoryRead in await ledger.read_event_notifier()
            (r,) = await event_read(ledger, details)
            assert r.StatusCode.value == ua.StatusCodes.BadDataUnavailable, r

            # HistoryUpdate of events is not forwarded: the mirror shows no HistoryWrite,
            # and updates and deletes are refused here.
            update = ua.UpdateEventDetails(
                NodeId=journal.nodeid,
                PerformInsertReplace=ua.PerformUpdateType.Insert,
                Filter=filter_here,
                EventData=[ua.HistoryEventFieldList(EventFields=[])],
            )
            delete = ua.DeleteEventDetails(NodeId=journal.nodeid, EventIds=[here[0].EventId])
            results = await c.uaclient.history_update(
                ua.HistoryUpdateParameters(HistoryUpdateDetails=[update, delete])
            )
            assert [r.StatusCode.value for r in results] == [ua.StatusCodes.BadNotWritable] * 2
            kept, _ = await event_history(there, start, end, 0, filter_there)
            assert len(kept) == 10, kept

    run(go())


def field(name):
    """A where clause operand: BaseEventType's field `name`."""
    return ua.SimpleAttributeOperand(
        TypeDefinitionId=ua.NodeId(ua.ObjectIds.BaseEventType),
        BrowsePath=[ua.QualifiedName(name, 0)],
        AttributeId=ua.AttributeIds.Value,
    )


def literal(value):
    if not isinstance(value, ua.Variant):
        value = ua.Variant(value)
    return ua.LiteralOperand(Value=value)



async def demo_history_variable(c, d, name):
    """The uaring downstream's Demo.History.<name>: as mirrored here (client `c` of the
    gateway), as the server has it (client `d` of the server), and its AccessLevel here."""
    node = await mirrored(c, "u", "Demo", "History", name)
    idx = await d.get_namespace_index("urn:uaring:server")
    direct = d.get_node(ua.NodeId(f"Demo.History.{name}", idx))
    level = (await node.read_attribute(ua.AttributeIds.AccessLevel)).Value.Value
    return node, direct, level


def test_processed_and_at_time_history_reads_are_forwarded(gateway):
    """uaring downstream (its Demo.History.Count, +1 a second, historized): processed and
    at-time reads through the gateway give what the server itself gives."""

    async def go():
        async with Client(gateway.url, timeout=10) as c, Client(
            gateway.udown.url, timeout=10
        ) as d:
            node, direct, level = await demo_history_variable(c, d, "Count")
            assert level & ua.AccessLevel.HistoryRead.mask, level
            end = datetime.now(timezone.utc)

            async def three():
                vs = await direct.read_raw_history(end - timedelta(seconds=30), end + timedelta(seconds=30))
                return vs if len(vs) >= 3 else None

            raw = await until("three values in the downstream's history", three)
            t0 = raw[0].SourceTimestamp.replace(tzinfo=timezone.utc)
            t1 = raw[2].SourceTimestamp.replace(tzinfo=timezone.utc)
            processed = ua.ReadProcessedDetails(
                StartTime=t0,
                EndTime=t1 + timedelta(milliseconds=1),
                ProcessingInterval=1000.0,
                AggregateType=[ua.NodeId(ua.ObjectIds.AggregateFunction_Count)],
            )
            at_time = ua.ReadAtTimeDetails(
                ReqTimes=[t0 + timedelta(milliseconds=500), t1], UseSimpleBounds=True
            )
            for details in (processed, at_time):
                here = await node.history_read(details)
                there = await direct.history_read(details)
                assert here.StatusCode.is_good(), here
                got = [(v.StatusCode.value, v.Value.Value, v.SourceTimestamp) for v in here.HistoryData.DataValues]
                want = [(v.StatusCode.value, v.Value.Value, v.SourceTimestamp) for v in there.HistoryData.DataValues]
                assert got and got == want, (details, got, want)

    run(go())


def test_history_updates_are_forwarded_where_configured(gateway):
    """uaring downstream, mirrored with `history_updates = true`: its Demo.History.Setpoint
    shows HistoryWrite here, and HistoryUpdate through the gateway (insert, replace, delete
    at times, delete a range) changes the server's history, with the server's own
    per-value statuses (without `history_updates` a mirror shows no HistoryWrite: the
    event-update refusal of test_event_history_of_a_mirrored_notifier_is_forwarded, and
    the gateway's unit tests)."""

    async def go():
        async with Client(gateway.url, timeout=10) as c, Client(
            gateway.udown.url, timeout=10
        ) as d:
            node, direct, level = await demo_history_variable(c, d, "Setpoint")
            want = ua.AccessLevel.HistoryRead.mask | ua.AccessLevel.HistoryWrite.mask
            assert level & want == want, level

            t0 = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=9)
            ts = [t0 + timedelta(seconds=i) for i in range(4)]

            def update(mode, values):
                return ua.UpdateDataDetails(
                    NodeId=node.nodeid,
                    PerformInsertReplace=mode,
                    UpdateValues=[
                        ua.DataValue(ua.Variant(v, ua.VariantType.Double), SourceTimestamp=t)
                        for t, v in values
                    ],
                )

            async def history_update(*details):
                return await c.uaclient.history_update(
                    ua.HistoryUpdateParameters(HistoryUpdateDetails=list(details))
                )

            (r,) = await history_update(
                update(ua.PerformUpdateType.Insert, [(t, float(i)) for i, t in enumerate(ts)])
            )
            assert r.StatusCode.is_good(), r
            assert [s.value for s in r.OperationResults] == [ua.StatusCodes.GoodEntryInserted] * 4
            r = await history_update(
                update(ua.PerformUpdateType.Replace, [(ts[1], 11.0)]),
                update(ua.PerformUpdateType.Insert, [(ts[2], 22.0)]),
                ua.DeleteAtTimeDetails(NodeId=node.nodeid, ReqTimes=[ts[3]]),
            )
            assert [s.value for s in r[0].OperationResults] == [ua.StatusCodes.GoodEntryReplaced]
            assert [s.value for s in r[1].OperationResults] == [ua.StatusCodes.BadEntryExists]
            assert r[2].StatusCode.is_good(), r[2]

            end = t0 + timedelta(seconds=10)
            there = await direct.read_raw_history(t0, end, return_bounds=False)
            assert [v.Value.Value for v in there] == [0.0, 11.0, 2.0], there
            here = await node.read_raw_history(t0, end, return_bounds=False)
            assert [v.Value.Value for v in here] == [0.0, 11.0, 2.0], here

            (r,) = await history_update(
                ua.DeleteRawModifiedDetails(
                    NodeId=node.nodeid, IsDeleteModified=False, StartTime=t0, EndTime=end
                )
            )
            assert r.StatusCode.is_good(), r
            assert await direct.read_raw_history(t0, end, return_bounds=False) == []
            # Nothing left to delete: the server's own status comes back.
            (r,) = await history_update(
                ua.DeleteRawModifiedDetails(
                    NodeId=node.nodeid, IsDeleteModified=False, StartTime=t0, EndTime=end
                )
            )
            assert r.StatusCode.value == ua.StatusCodes.BadNoData, r

    run(go())


def test_event_updates_are_forwarded_where_configured(gateway):
    """uaring downstream, mirrored with `history_updates = true`: its Demo.Events keeps its
    events (`event_notifiers` there) and shows HistoryRead and HistoryWrite here; an event
    inserted through the gateway (UpdateEventDetails, its fields named by a filter built
    here) is in the server's history, and deleted through the gateway by the EventId read
    here (DeleteEventDetails) it is gone there."""

    async def go():
        async with Client(gateway.url, timeout=10) as c, Client(
            gateway.udown.url, timeout=10
        ) as d:
            events = await mirrored(c, "u", "Demo", "Events")
            notifier = await events.read_event_notifier()
            assert ua.EventNotifier.HistoryRead in notifier, notifier
            assert ua.EventNotifier.HistoryWrite in notifier, notifier
            idx = await d.get_namespace_index("urn:uaring:server")
            there = d.get_node(ua.NodeId("Demo.Events", idx))

            def select(*names):
                return ua.EventFilter(
                    SelectClauses=[
                        ua.SimpleAttributeOperand(
                            TypeDefinitionId=ua.NodeId(ua.ObjectIds.BaseEventType),
                            BrowsePath=[ua.QualifiedName(n, 0)],
                            AttributeId=ua.AttributeIds.Value,
                        )
                        for n in names
                    ]
                )

            # Ten minutes ahead: apart from the Demo's own events.
            t = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=10)
            insert = ua.UpdateEventDetails(
                NodeId=events.nodeid,
                PerformInsertReplace=ua.PerformUpdateType.Insert,
                Filter=select("EventType", "Time", "Message", "Severity"),
                EventData=[
                    ua.HistoryEventFieldList(
                        EventFields=[
                            ua.Variant(ua.NodeId(ua.ObjectIds.BaseEventType)),
                            ua.Variant(t, ua.VariantType.DateTime),
                            ua.Variant(ua.LocalizedText("back-filled through the gateway")),
                            ua.Variant(321, ua.VariantType.UInt16),
                        ]
                    )
                ],
            )
            (r,) = await c.uaclient.history_update(
                ua.HistoryUpdateParameters(HistoryUpdateDetails=[insert])
            )
            assert r.StatusCode.is_good(), r
            assert [s.value for s in r.OperationResults] == [ua.StatusCodes.GoodEntryInserted], r

            window = (t - timedelta(seconds=1), t + timedelta(seconds=1))
            fields = select("EventId", "Message", "Severity")
            kept, _ = await event_history(there, *window, 0, fields)
            assert [(e.Message.Text, e.Severity) for e in kept] == [
                ("back-filled through the gateway", 321)
            ], kept
            here, _ = await event_history(events, *window, 0, fields)
            assert [e.Message.Text for e in here] == ["back-filled through the gateway"], here

            delete = ua.DeleteEventDetails(NodeId=events.nodeid, EventIds=[here[0].EventId])
            (r,) = await c.uaclient.history_update(
                ua.HistoryUpdateParameters(HistoryUpdateDetails=[delete])
            )
            assert r.StatusCode.is_good(), r
            assert [s.value for s in r.OperationResults] == [ua.StatusCodes.Good], r
            gone, _ = await event_history(there, *window, 0, fields)
            assert gone == [], gone

    run(go())


def test_released_continuation_points_are_released_on_the_downstream(gateway):
    """uaring downstream keeps ten continuation points a session (its default): twelve
    reads through the gateway, each leaving a point there and released here, all go through,
    since each release here releases the point on the downstream too (else the eleventh
    would get the downstream's BadNoContinuationPoints: the gateway's one session there
    holds them all); and so do the points of a session here that ends holding them."""

    async def go():
        async with Client(gateway.url, timeout=10) as c:
            node = await mirrored(c, "u", "Demo", "History", "Count")
            end = datetime.now(timezone.utc) + timedelta(seconds=30)
            details = ua.ReadRawModifiedDetails(
                IsReadModified=False,
                StartTime=end - timedelta(hours=1),
                EndTime=end,
                NumValuesPerNode=1,
                ReturnBounds=False,
            )

            async def two():
                vs = await node.read_raw_history(end - timedelta(hours=1), end)
                return vs if len(vs) >= 2 else None

            await until("two values in the downstream's history", two)
            for i in range(12):
                first = await node.history_read(details)
                assert first.StatusCode.is_good() and first.ContinuationPoint, (i, first)
                p = ua.HistoryReadParameters(
                    HistoryReadDetails=details,
                    TimestampsToReturn=ua.TimestampsToReturn.Both,
                    ReleaseContinuationPoints=True,
                    NodesToRead=[
                        ua.HistoryReadValueId(
                            NodeId=node.nodeid, ContinuationPoint=first.ContinuationPoint
                        )
                    ],
                )
                (released,) = await node.session.history_read(p)
                assert released.StatusCode.is_good(), (i, released)

        # Points a session here ends with, never released by its client: released on the
        # downstream with the session. Two sessions in turn each take the ten points a
        # session may hold here (the eleventh read is refused here); the second's reads
        # find room on the downstream (before, its session there still held the first's
        # ten: BadNoContinuationPoints to every read until the gateway's session ended).
        for s in range(2):
            async with Client(gateway.url, timeout=10) as c:
                node = await mirrored(c, "u", "Demo", "History", "Count")

                async def first_point():
                    r = await node.history_read(details)
                    if r.StatusCode.value == ua.StatusCodes.BadNoContinuationPoints:
                        return None  # the release of the session before may be on its way
                    return r

                r = await until(f"session {s}: a continuation point", first_point, timeout=10)
                assert r.StatusCode.is_good() and r.ContinuationPoint, (s, r)
                for i in range(1, 11):
                    r = await node.history_read(details)
                    if i < 10:
                        assert r.StatusCode.is_good() and r.ContinuationPoint, (s, i, r)
                    else:
                        assert r.StatusCode.value == ua.StatusCodes.BadNoContinuationPoints, (
                            s,
                            i,
                            r,
                        )

    run(go())


async def plant_alarm(c, d):
    """The plant example's alarm and Setpoint as mirrored here (client `c` of the gateway),
    and a function naming the plant's own nodes (client `d` of the plant)."""
    alarm = await mirrored(c, "p", "Plant", "HighSetpoint")
    setpoint = await mirrored(c, "p", "Plant", "Setpoint")
    ns = await d.get_namespace_index("urn:uaring:example:plant")
    return alarm, setpoint, lambda s: d.get_node(ua.NodeId(s, ns))


def test_acknowledge_and_confirm_reach_the_downstream_condition(gateway):
    """The plant example's alarm (a NonExclusiveLevelAlarmType, active above Setpoint 90):
    its event passes through the gateway; Acknowledge and Confirm called here on the mirrored
    condition with that event's EventId reach the condition on the plant (its AckedState and
    ConfirmedState there, and its application hook's count of acknowledgements)."""

    async def go():
        async with Client(gateway.url, timeout=10) as c, Client(
            gateway.pex.url, timeout=10
        ) as d:
            alarm, setpoint, there = await plant_alarm(c, d)
            acks = await there("Plant.AlarmAcks").read_value()
            h = Changes()
            sub = await c.create_subscription(50, h)
            await sub.subscribe_events(c.nodes.server)
            await setpoint.write_value(ua.DataValue(ua.Variant(95.0, ua.VariantType.Double)))

            async def alarm_event():
                return [e for e in h.events if e.EventType == ua.NodeId(10060, 0)]

            ev = (await until("the alarm's event through the gateway", alarm_event))[-1]
            assert await there("Plant.HighSetpoint.AckedState.Id").read_value() is False
            await alarm.call_method(
                ua.NodeId(9111, 0),
                ua.Variant(ev.EventId, ua.VariantType.ByteString),
                ua.Variant(ua.LocalizedText("acknowledged upstream"), ua.VariantType.LocalizedText),
            )
            assert await there("Plant.HighSetpoint.AckedState.Id").read_value() is True
            assert await there("Plant.AlarmAcks").read_value() == acks + 1
            assert await there("Plant.AlarmLastComment").read_value() == "acknowledged upstream"
            # The plant's own refusal comes back: that event is acknowledged (superseded).
            with pytest.raises(ua.UaStatusCodeError) as refused:
                await alarm.call_method(
                    ua.NodeId(9111, 0),
                    ua.Variant(ev.EventId, ua.VariantType.ByteString),
                    ua.Variant(ua.LocalizedText("again"), ua.VariantType.LocalizedText),
                )
            assert refused.value.code == ua.StatusCodes.BadEventIdUnknown, refused.value
            assert await there("Plant.AlarmAcks").read_value() == acks + 1
            # Confirm, with the EventId of the acknowledgement's own event.

            async def acked_event():
                return [e for e in h.events if e.EventType == ua.NodeId(10060, 0) and e.EventId != ev.EventId]

            ev2 = (await until("the acknowledgement's event", acked_event))[-1]
            await alarm.call_method(
                ua.NodeId(9113, 0),
                ua.Variant(ev2.EventId, ua.VariantType.ByteString),
                ua.Variant(ua.LocalizedText("confirmed upstream"), ua.VariantType.LocalizedText),
            )
            assert await there("Plant.HighSetpoint.ConfirmedState.Id").read_value() is True
            # An EventId the plant never issued: its own status.
            with pytest.raises(ua.UaStatusCodeError) as e:
                await alarm.call_method(
                    ua.NodeId(9111, 0),
                    ua.Variant(b"not an event", ua.VariantType.ByteString),
                    ua.Variant(ua.LocalizedText("x"), ua.VariantType.LocalizedText),
                )
            assert e.value.code == ua.StatusCodes.BadEventIdUnknown
            await setpoint.write_value(ua.DataValue(ua.Variant(50.0, ua.VariantType.Double)))
            await sub.delete()

    run(go())


def test_passed_on_alarm_events_carry_the_condition_fields(gateway):
    """The plant's alarm event through the gateway carries the condition fields (Part 9) the
    plant sent: an event filter here selects ConditionName, Retain, ActiveState and its Id,
    AckedState/Id, HighLimit and the ConditionId, and gets them as the plant has them, before
    and after an Acknowledge called here."""
    from test_asyncua_events import collect_events, event_items, select
    from test_asyncua_subscriptions import Raw

    async def go():
        async with Client(gateway.url, timeout=10) as c, Client(
            gateway.pex.url, timeout=10
        ) as d:
            alarm, setpoint, there = await plant_alarm(c, d)
            await setpoint.write_value(ua.DataValue(ua.Variant(50.0, ua.VariantType.Double)))
            r = Raw(c)
            sub = await r.create_subscription(interval=50)
            f = ua.EventFilter()
            f.SelectClauses = [
                select("EventType"),
                select("EventId"),
                select("ConditionName", type_id=ua.NodeId(2782, 0)),
                select("Retain", type_id=ua.NodeId(2782, 0)),
                select("ActiveState", type_id=ua.NodeId(2915, 0)),
                select("ActiveState", "Id", type_id=ua.NodeId(2915, 0)),
                select("AckedState", "Id", type_id=ua.NodeId(2881, 0)),
                select("HighLimit", type_id=ua.NodeId(2955, 0)),
                select(type_id=ua.NodeId(2782, 0), attr=ua.AttributeIds.NodeId),
            ]
            res = await event_items(r, sub.SubscriptionId, [(ua.NodeId(2253, 0), f)])
            assert res[0].StatusCode.is_good(), res[0]
            await setpoint.write_value(ua.DataValue(ua.Variant(95.0, ua.VariantType.Double)))

            def active(g):
                return [x for (_, x) in g if x[0] == ua.NodeId(10060, 0) and x[5] is True]

            ev = active(await collect_events(r, active))[-1]
            assert ev[2] == "HighSetpoint", ev
            assert ev[3] is True, "an active alarm is retained"
            assert ev[4].Text == "Active", ev[4]
            assert ev[6] is False and await there("Plant.HighSetpoint.AckedState.Id").read_value() is False
            assert ev[7] == 90.0, "the limit alarm's HighLimit"
            assert ev[8] == alarm.nodeid, "the ConditionId names the mirrored condition"
            await alarm.call_method(
                ua.NodeId(9111, 0),
                ua.Variant(ev[1], ua.VariantType.ByteString),
                ua.Variant(ua.LocalizedText("seen through the gateway"), ua.VariantType.LocalizedText),
            )

            def acked(g):
                return [x for (_, x) in g if x[0] == ua.NodeId(10060, 0) and x[6] is True]

            ev2 = acked(await collect_events(r, acked))[-1]
            assert ev2[1] != ev[1] and ev2[5] is True and ev2[2] == "HighSetpoint"
            assert await there("Plant.HighSetpoint.AckedState.Id").read_value() is True
            await setpoint.write_value(ua.DataValue(ua.Variant(50.0, ua.VariantType.Double)))

    run(go())


def test_configured_nodes_are_monitored_whatever_the_demand(gateway):
    """`monitor` (a NodeId and a browse path): two items on uaring downstream from the
    start, with no item here; the mirrored cells are kept current (read from the cell: maxAge
    long); an item here comes and goes and the two stay."""

    async def cell(c, node):
        rv = ua.ReadValueId(NodeId=node.nodeid, AttributeId=ua.AttributeIds.Value)
        p = ua.ReadParameters(MaxAge=3.6e6, NodesToRead=[rv])
        (dv,) = await c.uaclient.read(p)
        return dv

    async def go():
        async with Client(gateway.url, timeout=10) as c:
            items = await mirrored(c, "u", "MonitoredItems")
            counter = await mirrored(c, "u", "Demo", "Dynamic", "Counter")

            async def two():
                return await items.read_value() == 2

            await until("the two configured items on the server", two)
            first = await cell(c, counter)

            async def advanced():
                dv = await cell(c, counter)
                return dv.StatusCode.is_good() and dv.Value.Value > first.Value.Value

            await until("the cell kept current without an item here", advanced)
            h = Changes()
            sub = await c.create_subscription(50, h)
            await sub.subscribe_data_change(counter, queuesize=10, sampling_interval=0)

            async def some():
                return len([v for v in h.values if v.StatusCode.is_good()]) >= 2

            await until("values of the configured node", some)
            assert await items.read_value() == 2
            await sub.delete()
            # Still monitored there after the last item here went: good, advancing values.
            last = await cell(c, counter)

            async def still():
                dv = await cell(c, counter)
                return dv.StatusCode.is_good() and dv.Value.Value > last.Value.Value

            await until("the cell still current after the last item here", still)
            assert await items.read_value() == 2

    run(go())


def test_a_model_change_event_makes_the_gateway_browse_again(gateway):
    """The downstream adds a Variable and raises a GeneralModelChangeEvent: the mirror gains
    it without a configured refresh."""

    async def go():
        async with Client(gateway.url, timeout=10) as c:
            line = await mirrored(c, gateway.down_name, "Line1")
            grow = await mirrored(c, gateway.down_name, "Line1", "Grow")
            assert await child(line, "Grown") is None
            await line.call_method(grow, ua.Variant("Grown", ua.VariantType.String))
            grown = await mirrored(c, gateway.down_name, "Line1", "Grown")
            assert (await grown.read_data_value()).Value.Value == 0.0

    run(go())


def test_a_secured_downstream_with_a_user_and_the_last_usable_value_while_away(tmp_path):
    """uaring downstream with anonymous logins off: the gateway connects over
    Basic256Sha256 SignAndEncrypt as a configured user (the server's certificate pinned);
    reads and writes pass; with `while_away = "uncertain_last_usable_value"`, killing the
    downstream leaves the last value marked UncertainLastUsableValue on the subscription
    and on Read."""
    pw_hash = subprocess.run(
        [Server.__init__.__globals__["uaring_bin"](), "hash-password"],
        input="gw-pw\n", capture_output=True, text=True, check=True,
    ).stdout.strip()
    dcfg = tmp_path / "down.toml"
    dcfg.write_text(
        f'[history]\ndir = "{tmp_path / "down-history"}"\n'
        '[security]\nanonymous = "off"\n'
        f'[[users]]\nname = "gw"\npassword = "{pw_hash}"\nrole = "readwrite"\n'
    )
    down = Server("--pki", str(tmp_path / "down-pki"), "--accept-all-client-certs", "--config", str(dcfg))
    gcfg = tmp_path / "gw.toml"
    gcfg.write_text(
        f'[history]\ndir = "{tmp_path / "gw-history"}"\n'
        "[[gateway.servers]]\n"
        'name = "s"\n'
        f'endpoint = "{down.url}"\n'
        'security_policy = "Basic256Sha256"\nsecurity_mode = "SignAndEncrypt"\n'
        f'server_certificate = "{tmp_path / "down-pki" / "own" / "certs" / "uaring.der"}"\n'
        'user = "gw"\npassword = "gw-pw"\n'
        'mirror = ["nsu=urn:uaring:server;s=Demo.Static"]\n'
        'while_away = "uncertain_last_usable_value"\n'
        "reconnect_min_ms = 100\nreconnect_max_ms = 200\n"
    )
    gw = Server("--pki", str(tmp_path / "gw-pki"), "--config", str(gcfg))
    try:

        async def go():
            async with Client(gw.url, timeout=10) as c:
                double = await mirrored(c, "s", "Static", "Double")
                state = await mirrored(c, "s", "State")
                assert await state.read_value() == "connected"
                await double.write_value(ua.DataValue(ua.Variant(12.5, ua.VariantType.Double)))
                rv = ua.ReadValueId(NodeId=double.nodeid, AttributeId=ua.AttributeIds.Value)
                (fresh,) = await c.uaclient.read(ua.ReadParameters(MaxAge=0, NodesToRead=[rv]))
                assert fresh.StatusCode.is_good() and fresh.Value.Value == 12.5, fresh
                h = Changes()
                sub = await c.create_subscription(50, h)
                await sub.subscribe_data_change(double, queuesize=10, sampling_interval=0)

                async def good():
                    return any(v.StatusCode.is_good() and v.Value.Value == 12.5 for v in h.values)

                await until("the written value on the subscription", good)
                down.proc.kill()
                down.proc.wait()

                async def uncertain():
                    return [
                        v for v in h.values
                        if v.StatusCode.value == ua.StatusCodes.UncertainLastUsableValue
                    ]

                (last, *_) = await until("UncertainLastUsableValue on the subscription", uncertain)
                assert last.Value.Value == 12.5, last
                # Reads say the same, whatever their maxAge (the best effort while away).
                for max_age in (3.6e6, 0):
                    p = ua.ReadParameters(MaxAge=max_age, NodesToRead=[rv])
                    (dv,) = await c.uaclient.read(p)
                    assert dv.StatusCode.value == ua.StatusCodes.UncertainLastUsableValue, dv
                    assert dv.Value.Value == 12.5
                await sub.delete()

        run(go())
    finally:
        down.stop()
        assert gw.stop() == 0
