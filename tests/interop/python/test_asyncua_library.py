"""asyncua (PyPI) against the examples of the `uaring` library crate (shards/examples/):
`minimal` and `plant`, servers of their own data built on the public API.

Browse and read what the application defined, subscribe to values pushed from an
application thread (every change, in order, also many within one publishing interval, on a
two-shard server), 20 quick client Writes into a queue of 20 from connections on both shards,
a read callback, a rejecting write hook, a method and the event it raises filtered by a where
clause.
"""
import asyncio

import pytest
from asyncua import Client, ua

from conftest import Server, example_bin
from test_asyncua_events import base_filter, collect_events, event_items, select, severity_at_least
from test_asyncua_subscriptions import Raw

PLANT_NS = "urn:uaring:example:plant"


def run(coro, timeout=90):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def start(tmp, name, *args):
    cfg = tmp / f"{name}.toml"
    # Two shards, connections dealt round robin: consecutive connections land on different shards.
    cfg.write_text('[runtime]\nshards = 2\ndistribution = "round-robin"\n')
    extra = ["--config", str(cfg), "--pki", str(tmp / "pki")] if name == "plant" else []
    return Server(*extra, *args, command=[example_bin(name)])


@pytest.fixture(scope="module")
def plant(tmp_path_factory):
    s = start(tmp_path_factory.mktemp("plant"), "plant", "--variables", "50", "--rate", "10")
    yield s
    assert s.stop() == 0, "plant exits 0 on SIGTERM"


@pytest.fixture(scope="module")
def fast_plant(tmp_path_factory):
    """One variable pushed 1,000 times a second."""
    s = start(tmp_path_factory.mktemp("fast"), "plant", "--variables", "1", "--rate", "1000")
    yield s
    assert s.stop() == 0


class Values:
    def __init__(self):
        self.v = []

    def datachange_notification(self, node, val, data):
        self.v.append((val, data.monitored_item.Value.StatusCode.value))


def test_minimal_serves_its_variable(tmp_path):
    s = start(tmp_path, "minimal")
    try:
        async def body():
            async with Client(s.url, timeout=10) as c:
                ns = await c.get_namespace_index("urn:uaring:example:minimal")
                objects = c.get_node(ua.NodeId(85, 0))
                names = [(await n.read_browse_name()) for n in await objects.get_children()]
                assert ua.QualifiedName("Temperature", ns) in names
                t = c.get_node(ua.NodeId("Temperature", ns))
                assert await t.read_data_type_as_variant_type() == ua.VariantType.Double
                v = await t.read_value()
                assert isinstance(v, float) and 20.0 <= v < 21.0
                h = Values()
                sub = await c.create_subscription(100, h)
                await sub.subscribe_data_change(t, queuesize=10, sampling_interval=0)
                await asyncio.sleep(2.5)
                assert len(h.v) >= 2, "the application thread's pushes are reported"
        run(body())
    finally:
        assert s.stop() == 0


def test_plant_address_space(plant):
    async def body():
        async with Client(plant.url, timeout=10) as c:
            ns = await c.get_namespace_index(PLANT_NS)
            folder = c.get_node(ua.NodeId("Plant", ns))
            names = {(await n.read_browse_name()).Name for n in await folder.get_children()}
            assert {f"V{i}" for i in range(50)} <= names
            assert {"Setpoint", "Pushes", "Reset"} <= names
            assert await folder.read_event_notifier() == {ua.EventNotifier.SubscribeToEvents}
            v0 = c.get_node(ua.NodeId("Plant.V0", ns))
            assert await v0.read_data_type_as_variant_type() == ua.VariantType.Double
            assert (await v0.read_value()) >= 0.0
            # Read-only for clients.
            with pytest.raises(ua.UaStatusCodeError) as e:
                await v0.write_value(ua.DataValue(ua.Variant(1.0, ua.VariantType.Double)))
            assert e.value.code == ua.StatusCodes.BadNotWritable
    run(body())


def test_every_push_within_one_publishing_interval_arrives_in_order(fast_plant):
    """1,000 pushes a second, publishing interval 500 ms, queue 1,000: the ~500 pushes of
    every interval all arrive, in order, none lost, no overflow."""
    async def body():
        async with Client(fast_plant.url, timeout=10) as c:
            ns = await c.get_namespace_index(PLANT_NS)
            h = Values()
            sub = await c.create_subscription(500, h)
            await sub.subscribe_data_change(c.get_node(ua.NodeId("Plant.V0", ns)), queuesize=1000, sampling_interval=0)
            await asyncio.sleep(4.5)
            await sub.delete()
            ks = [int(v) for (v, _) in h.v]
            assert len(ks) >= 2500, f"{len(ks)} notifications in 4.5 s at 1,000 pushes/s"
            steps = [b - a for a, b in zip(ks[1:], ks[2:])]
            assert set(steps) == {1}, f"gaps or disorder: {[s for s in steps if s != 1][:10]}"
            assert all(s & 0x480 == 0 for (_, s) in h.v), "no overflow bit"
    run(body())


def test_a_thousand_values_pushed_back_to_back_all_arrive(fast_plant):
    """Plant.Burst pushes 1..1000 back to back from an application (worker) thread: an item
    with a queue of 1,000 on a two-shard server gets every one, in order, within one
    publishing interval."""
    async def body():
        async with Client(fast_plant.url, timeout=10) as c:
            ns = await c.get_namespace_index(PLANT_NS)
            h = Values()
            sub = await c.create_subscription(1000, h)
            await sub.subscribe_data_change(c.get_node(ua.NodeId("Plant.BurstValue", ns)), queuesize=1000, sampling_interval=0)
            await asyncio.sleep(1.2)
            h.v.clear()
            await c.get_node(ua.NodeId("Plant", ns)).call_method(ua.NodeId("Plant.Burst", ns), ua.Variant(1000, ua.VariantType.UInt32))
            for _ in range(40):
                if len(h.v) >= 1000:
                    break
                await asyncio.sleep(0.1)
            await sub.delete()
            assert [int(v) for (v, _) in h.v] == list(range(1, 1001))
            assert all(s & 0x480 == 0 for (_, s) in h.v)
    run(body())


def test_twenty_quick_writes_arrive_as_twenty_notifications(plant):
    async def body():
        async with Client(plant.url, timeout=10) as subscriber:
            ns = await subscriber.get_namespace_index(PLANT_NS)
            sp = ua.NodeId("Plant.Setpoint", ns)
            h = Values()
            sub = await subscriber.create_subscription(200, h)
            await sub.subscribe_data_change(subscriber.get_node(sp), queuesize=20, sampling_interval=0)
            await asyncio.sleep(0.5)
            # Round robin over two shards: the next connection is on the other shard, the one
            # after on the subscriber's own.
            for first in (1, 21):
                async with Client(plant.url, timeout=10) as writer:
                    node = writer.get_node(sp)
                    for v in range(first, first + 20):
                        await node.write_value(ua.DataValue(ua.Variant(float(v), ua.VariantType.Double)))
                await asyncio.sleep(0.6)
            got = [v for (v, _) in h.v]
            assert got[0] == 50.0, "the initial value"
            assert got[1:] == [float(v) for v in range(1, 41)]
    run(body())


def test_read_callback_and_rejecting_write_hook(plant):
    async def body():
        async with Client(plant.url, timeout=10) as c:
            ns = await c.get_namespace_index(PLANT_NS)
            pushes = c.get_node(ua.NodeId("Plant.Pushes", ns))
            assert await pushes.read_data_type_as_variant_type() == ua.VariantType.UInt64
            a = await pushes.read_value()
            await asyncio.sleep(0.5)
            b = await pushes.read_value()
            assert b > a, "computed at every read: 500 pushes a second"
            sp = c.get_node(ua.NodeId("Plant.Setpoint", ns))
            await sp.write_value(ua.DataValue(ua.Variant(42.0, ua.VariantType.Double)))
            with pytest.raises(ua.UaStatusCodeError) as e:
                await sp.write_value(ua.DataValue(ua.Variant(420.0, ua.VariantType.Double)))
            assert e.value.code == ua.StatusCodes.BadOutOfRange
            assert await sp.read_value() == 42.0, "a rejected write stores nothing"
            with pytest.raises(ua.UaStatusCodeError) as e:
                await sp.write_value(ua.DataValue(ua.Variant(7, ua.VariantType.Int32)))
            assert e.value.code == ua.StatusCodes.BadTypeMismatch
    run(body())


def test_namespace_write_hook_guards_the_variables_without_their_own(plant):
    """The plant namespace's write hook takes finite Doubles for HighLimit and LowLimit (no
    hook of their own); Setpoint keeps its own (0..=100); read-only sensors stay read-only."""
    async def body():
        async with Client(plant.url, timeout=10) as c:
            ns = await c.get_namespace_index(PLANT_NS)
            high = c.get_node(ua.NodeId("Plant.HighLimit", ns))
            assert await high.read_value() == 95.0
            await high.write_value(ua.DataValue(ua.Variant(150.0, ua.VariantType.Double)))
            assert await high.read_value() == 150.0, "the namespace's rule, not Setpoint's 0..=100"
            with pytest.raises(ua.UaStatusCodeError) as e:
                await high.write_value(ua.DataValue(ua.Variant(float("nan"), ua.VariantType.Double)))
            assert e.value.code == ua.StatusCodes.BadOutOfRange
            low = c.get_node(ua.NodeId("Plant.LowLimit", ns))
            with pytest.raises(ua.UaStatusCodeError) as e:
                await low.write_value(ua.DataValue(ua.Variant(float("inf"), ua.VariantType.Double)))
            assert e.value.code == ua.StatusCodes.BadOutOfRange
            assert (await high.read_value(), await low.read_value()) == (150.0, 5.0)
            sp = c.get_node(ua.NodeId("Plant.Setpoint", ns))
            with pytest.raises(ua.UaStatusCodeError) as e:
                await sp.write_value(ua.DataValue(ua.Variant(150.0, ua.VariantType.Double)))
            assert e.value.code == ua.StatusCodes.BadOutOfRange, "its own hook, not the namespace's"
            with pytest.raises(ua.UaStatusCodeError) as e:
                await c.get_node(ua.NodeId("Plant.V0", ns)).write_value(
                    ua.DataValue(ua.Variant(1.0, ua.VariantType.Double)))
            assert e.value.code == ua.StatusCodes.BadNotWritable, "a hook makes nothing writable"
    run(body())


def test_method_raises_an_event_filtered_by_a_where_clause(plant):
    async def body():
        async with Client(plant.url, timeout=10) as c:
            ns = await c.get_namespace_index(PLANT_NS)
            folder = ua.NodeId("Plant", ns)
            r = Raw(c)
            sub = await r.create_subscription(interval=50)
            res = await event_items(r, sub.SubscriptionId, [
                (folder, base_filter(severity_at_least(400))),
                (folder, base_filter(severity_at_least(600))),
            ])
            assert all(x.StatusCode.is_good() for x in res), res
            before = await c.get_node(folder).call_method(ua.NodeId("Plant.Reset", ns))
            assert isinstance(before, int) and before > 0
            got = await collect_events(r, lambda g: any(h == 100 for (h, _) in g))
            resets = [(h, f) for (h, f) in got if f[2].Text == "plant reset"]
            assert [h for (h, _) in resets] == [100], "Severity 500 passes >= 400 only"
            fields = resets[0][1]
            assert fields[0] == ua.NodeId(2041, 0) and fields[1] == "Plant" and fields[3] == 500
            # The count restarted.
            after = await c.get_node(ua.NodeId("Plant.Pushes", ns)).read_value()
            assert after < before
    run(body())


def test_async_source_answers_after_the_device_while_other_reads_keep_their_latency(plant):
    """Plant.Device is answered by a device thread 50 ms later; Reads of stored values on the
    same connection (so the same shard) are answered meanwhile."""
    async def body():
        async with Client(plant.url, timeout=10) as c:
            ns = await c.get_namespace_index(PLANT_NS)
            dev = c.get_node(ua.NodeId("Plant.Device", ns))
            v0 = c.get_node(ua.NodeId("Plant.V0", ns))
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            slow = asyncio.ensure_future(dev.read_value())
            fast = []
            while not slow.done():
                t = loop.time()
                await v0.read_value()
                fast.append(loop.time() - t)
                await asyncio.sleep(0.002)
            device_s = loop.time() - t0
            assert isinstance(slow.result(), float)
            assert device_s >= 0.045, f"the device answers after 50 ms, not {device_s * 1000:.1f} ms"
            assert len(fast) >= 3, "other Reads were answered while the device read waited"
            assert max(fast) < device_s, "no other Read waited for the device"
    run(body())


def test_async_write_hook_and_the_device_value(plant):
    async def body():
        async with Client(plant.url, timeout=10) as c:
            ns = await c.get_namespace_index(PLANT_NS)
            sp = c.get_node(ua.NodeId("Plant.DeviceSetpoint", ns))
            await sp.write_value(ua.DataValue(ua.Variant(7.25, ua.VariantType.Double)))
            assert await sp.read_value() == 7.25, "stored once the device answered Good"
            assert await c.get_node(ua.NodeId("Plant.Device", ns)).read_value() == 7.25, "the device took it"
            with pytest.raises(ua.UaStatusCodeError) as e:
                await sp.write_value(ua.DataValue(ua.Variant(-1.0, ua.VariantType.Double)))
            assert e.value.code == ua.StatusCodes.BadOutOfRange
            assert await sp.read_value() == 7.25
    run(body())


def test_slow_method_runs_on_the_pool_while_the_server_serves(plant):
    async def body():
        async with Client(plant.url, timeout=10) as c, Client(plant.url, timeout=10) as other:
            ns = await c.get_namespace_index(PLANT_NS)
            folder = c.get_node(ua.NodeId("Plant", ns))
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            call = asyncio.ensure_future(folder.call_method(ua.NodeId("Plant.Calibrate", ns), ua.Variant(1.0, ua.VariantType.Double)))
            reads = 0
            v0 = other.get_node(ua.NodeId("Plant.V0", ns))
            # Both connections (one per shard, round robin) are served while the method runs.
            while not call.done():
                await v0.read_value()
                await c.get_node(ua.NodeId("Plant.V1", ns)).read_value()
                reads += 1
                await asyncio.sleep(0.01)
            assert call.result() == 1.0
            assert loop.time() - t0 >= 0.95
            assert reads >= 20, f"only {reads} read rounds during a 1 s method"
    run(body())


LEVEL_ALARM = ua.NodeId(10060, 0)  # NonExclusiveLevelAlarmType


def of_type_filter(type_id, selects):
    """An EventFilter whose where clause is OfType(type_id)."""
    el = ua.ContentFilterElement()
    el.FilterOperator = ua.FilterOperator.OfType
    el.FilterOperands = [ua.LiteralOperand(Value=ua.Variant(type_id, ua.VariantType.NodeId))]
    f = ua.EventFilter()
    f.SelectClauses = selects
    f.WhereClause = ua.ContentFilter(Elements=[el])
    return f


def test_alarm_driven_by_the_application_and_acknowledged_by_the_client(plant):
    """Plant.HighSetpoint (a NonExclusiveLevelAlarmType, HighLimit 90) goes active when
    Setpoint > 90 (the write hook drives it); the client sees its event, also through an
    OfType(LimitAlarmType) filter that selects HighLimit, acknowledges it with a comment, and the
    application's hook sees the acknowledgement (Plant.AlarmAcks, Plant.AlarmLastComment)."""
    async def body():
        async with Client(plant.url, timeout=10) as c:
            ns = await c.get_namespace_index(PLANT_NS)
            alarm = ua.NodeId("Plant.HighSetpoint", ns)
            r = Raw(c)
            sub = await r.create_subscription(interval=50)
            # The alarm is a NonExclusiveLevelAlarmType with the Property HighLimit.
            type_def = await c.get_node(alarm).read_type_definition()
            assert type_def == LEVEL_ALARM, type_def
            assert await c.get_node(ua.NodeId("Plant.HighSetpoint.HighLimit", ns)).read_value() == 90.0
            res = await event_items(r, sub.SubscriptionId, [
                (ua.NodeId("Plant", ns), base_filter(severity_at_least(700))),
                (ua.NodeId("Plant", ns), of_type_filter(ua.NodeId(2955, 0), [select("EventType"), select("HighLimit", type_id=ua.NodeId(2955, 0))])),
            ])
            assert all(x.StatusCode.is_good() for x in res), res
            acks_before = await c.get_node(ua.NodeId("Plant.AlarmAcks", ns)).read_value()
            sp = c.get_node(ua.NodeId("Plant.Setpoint", ns))
            await sp.write_value(ua.DataValue(ua.Variant(95.0, ua.VariantType.Double)))
            got = await collect_events(r, lambda g: any(h == 100 and f[0] == LEVEL_ALARM for (h, f) in g) and any(h == 101 for (h, _) in g))
            ev = next(f for (h, f) in got if h == 100 and f[0] == LEVEL_ALARM)
            assert ev[1] == "Plant" and ev[2].Text == "setpoint 95" and ev[3] == 800
            # The OfType(LimitAlarmType) item: the subtype's own field, HighLimit, selected.
            limit = next(f for (h, f) in got if h == 101)
            assert limit[0] == LEVEL_ALARM and limit[1] == 90.0, limit
            assert await c.get_node(ua.NodeId("Plant.HighSetpoint.ActiveState.Id", ns)).read_value() is True
            assert await c.get_node(ua.NodeId("Plant.HighSetpoint.AckedState.Id", ns)).read_value() is False
            await c.get_node(alarm).call_method(
                ua.NodeId(9111, 0),
                ua.Variant(ev[4], ua.VariantType.ByteString),
                ua.Variant(ua.LocalizedText("seen by the test"), ua.VariantType.LocalizedText),
            )
            assert await c.get_node(ua.NodeId("Plant.HighSetpoint.AckedState.Id", ns)).read_value() is True
            assert await c.get_node(ua.NodeId("Plant.AlarmAcks", ns)).read_value() == acks_before + 1
            assert await c.get_node(ua.NodeId("Plant.AlarmLastComment", ns)).read_value() == "seen by the test"
            # A second Acknowledge of the same event: already acknowledged.
            with pytest.raises(ua.UaStatusCodeError):
                await c.get_node(alarm).call_method(
                    ua.NodeId(9111, 0),
                    ua.Variant(ev[4], ua.VariantType.ByteString),
                    ua.Variant(ua.LocalizedText("again"), ua.VariantType.LocalizedText),
                )
            await sp.write_value(ua.DataValue(ua.Variant(50.0, ua.VariantType.Double)))
            assert await c.get_node(ua.NodeId("Plant.HighSetpoint.ActiveState.Id", ns)).read_value() is False
    run(body())
