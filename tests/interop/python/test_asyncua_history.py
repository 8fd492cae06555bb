"""asyncua (PyPI) reading history from the real `uaring` binary: the Demo folder's
historized Variables (Demo.History.*, kept in the embedded store from the start, no set-up),
values a client writes read back raw with asyncua's read_raw_history, continuation points
page by page and released, values at given times (interpolated), processed reads through
the Part 13 engine, the Server object's events with read_event_history and an EventFilter,
and HistoryServerCapabilities saying what is served.
"""
import asyncio
import time
import datetime

import pytest
from asyncua import ua

from conftest import Server, session

UTC = datetime.timezone.utc


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture(scope="module")
def hist_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("uaring-history")
    cfg = root / "history.toml"
    cfg.write_text(
        f'[history]\nenabled = true\ndir = "{root / "store"}"\nflush_interval_ms = 100\n'
        'nodes = ["ns=1;s=Demo.Static.Int32", "nsu=urn:uaring:server;s=Demo.Static.Arrays.U*",'
        ' "ns=1;s=Demo.Static.UInt32"]\n'
        'event_notifiers = ["ns=1;s=Demo.Events"]\n'
        '[[history.sampled]]\nnodes = ["ns=1;s=Demo.Static.Float"]\ninterval_ms = 300\n'
        '[[history.sampled]]\nnodes = ["ns=1;s=Demo.Dynamic.Counter"]\ninterval_ms = 200\n'
        '[[history.collection]]\nnodes = ["ns=1;s=Demo.Static.UInt32"]\nexception_deviation = 10\n'
    )
    s = Server("--config", str(cfg), "--pki", str(root / "pki"))
    yield s
    assert s.stop() == 0


def setpoint(c):
    return c.get_node("ns=1;s=Demo.History.Setpoint")


async def history_read(c, details, node_id, cp=b"", release=False):
    p = ua.HistoryReadParameters()
    p.HistoryReadDetails = details
    p.TimestampsToReturn = ua.TimestampsToReturn.Both
    p.ReleaseContinuationPoints = release
    v = ua.HistoryReadValueId()
    v.NodeId = ua.NodeId.from_string(node_id)
    v.ContinuationPoint = cp
    p.NodesToRead = [v]
    return (await c.uaclient.history_read(p))[0]


def raw_details(start, end, n=0, bounds=False):
    d = ua.ReadRawModifiedDetails()
    d.IsReadModified = False
    d.StartTime = start
    d.EndTime = end
    d.NumValuesPerNode = n
    d.ReturnBounds = bounds
    return d


async def write_values(c, values):
    node = setpoint(c)
    for v in values:
        await node.write_value(ua.DataValue(ua.Variant(float(v), ua.VariantType.Double)))


async def wait_written(node, start, written, timeout=10.0):
    """The raw values from `start` that are the ones in `written`, once all are stored (other
    tests on this module's server may have left values after `start`: the at-time test stores
    two with SourceTimestamps a second in the future)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        end = datetime.datetime.now(UTC) + datetime.timedelta(seconds=5)
        vals = await node.read_raw_history(start, end, return_bounds=False)
        mine = [v for v in vals if v.Value.Value in written]
        if len(mine) >= len(written) or asyncio.get_running_loop().time() > deadline:
            return mine
        await asyncio.sleep(0.1)


async def wait_values(node, start, want, timeout=10.0):
    """The raw history from `start` once it holds at least `want` values."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        end = datetime.datetime.now(UTC) + datetime.timedelta(seconds=5)
        vals = await node.read_raw_history(start, end, return_bounds=False)
        if len(vals) >= want or asyncio.get_running_loop().time() > deadline:
            return vals
        await asyncio.sleep(0.1)


def test_the_demo_history_is_kept_without_any_set_up(hist_server):
    async def body():
        async with session(hist_server.url) as c:
            count = c.get_node("ns=1;s=Demo.History.Count")
            assert await count.read_attribute(ua.AttributeIds.Historizing) is not None
            hist = (await count.read_attribute(ua.AttributeIds.Historizing)).Value.Value
            assert hist is True
            level = (await count.read_attribute(ua.AttributeIds.AccessLevel)).Value.Value
            assert level & ua.AccessLevel.HistoryRead.mask
            # Its HistoricalDataConfiguration (Part 11 §5.2.2): stepped for an Int32, sloped
            # for a Double, with the AggregateConfiguration a processed read's server
            # defaults are.
            for name, stepped in (("Count", True), ("Setpoint", False)):
                node = c.get_node(f"ns=1;s=Demo.History.{name}")
                [ref] = await node.get_references(refs=ua.ObjectIds.HasHistoricalConfiguration)
                ha = c.get_node(ref.NodeId)
                assert ref.BrowseName.Name == "HA Configuration", ref
                assert (await ha.read_type_definition()) == ua.NodeId(
                    ua.ObjectIds.HistoricalDataConfigurationType
                )
                assert await (await ha.get_child("0:Stepped")).read_value() is stepped
                agg = await ha.get_child("0:AggregateConfiguration")
                got = [
                    await (await agg.get_child(f"0:{p}")).read_value()
                    for p in (
                        "TreatUncertainAsBad",
                        "PercentDataBad",
                        "PercentDataGood",
                        "UseSlopedExtrapolation",
                    )
                ]
                assert got == [True, 100, 100, False], got
                assert await (await ha.get_child("0:ServerTimestampSupported")).read_value()
            start = datetime.datetime.now(UTC) - datetime.timedelta(hours=1)
            vals = await wait_values(count, start, 3)
            counts = [v.Value.Value for v in vals]
            assert len(counts) >= 3
            assert counts == sorted(counts), "one a second, in order"
            ts = [v.SourceTimestamp for v in vals]
            assert ts == sorted(ts)

    run(body())


def test_written_values_are_read_back_raw_in_order(hist_server):
    async def body():
        async with session(hist_server.url) as c:
            start = datetime.datetime.now(UTC)
            await asyncio.sleep(0.01)
            await write_values(c, [1.5, 2.5, 3.5, 4.5])
            vals = await wait_values(setpoint(c), start, 4)
            assert [v.Value.Value for v in vals] == [1.5, 2.5, 3.5, 4.5]
            assert all(v.ServerTimestamp is not None for v in vals)
            # Bounds: asyncua asks for them by default; before the first write there is
            # none after `start`... the start bound is the value before it (or BadBoundNotFound).
            end = datetime.datetime.now(UTC) + datetime.timedelta(seconds=1)
            with_bounds = await setpoint(c).read_raw_history(start, end)
            assert [v.Value.Value for v in with_bounds[1:-1]] == [1.5, 2.5, 3.5, 4.5]
            assert with_bounds[-1].StatusCode.value == ua.StatusCodes.BadBoundNotFound

    run(body())


def test_continuation_points_page_through_and_can_be_released(hist_server):
    async def body():
        async with session(hist_server.url) as c:
            start = datetime.datetime.now(UTC)
            await asyncio.sleep(0.01)
            await write_values(c, range(100, 130))
            await wait_values(setpoint(c), start, 30)
            end = datetime.datetime.now(UTC) + datetime.timedelta(seconds=1)
            details = raw_details(start, end, n=7)
            got, cp, calls = [], b"", 0
            while True:
                r = await history_read(c, details, "ns=1;s=Demo.History.Setpoint", cp)
                calls += 1
                assert r.StatusCode.is_good()
                got += [v.Value.Value for v in r.HistoryData.DataValues]
                cp = r.ContinuationPoint
                if not cp:
                    break
            assert got == [float(x) for x in range(100, 130)]
            assert calls == 5, "30 values, 7 at a time"
            # Release: the point is gone afterwards.
            r = await history_read(c, details, "ns=1;s=Demo.History.Setpoint")
            cp = r.ContinuationPoint
            assert cp
            r = await history_read(c, details, "ns=1;s=Demo.History.Setpoint", cp, release=True)
            assert r.StatusCode.is_good()
            r = await history_read(c, details, "ns=1;s=Demo.History.Setpoint", cp)
            assert r.StatusCode.value == ua.StatusCodes.BadContinuationPointInvalid

    run(body())


def test_values_at_given_times_are_raw_or_interpolated(hist_server):
    async def body():
        async with session(hist_server.url) as c:
            # Source timestamps the client gives (whole microseconds, as Python has them).
            t1 = datetime.datetime.now(UTC).replace(microsecond=0) + datetime.timedelta(seconds=1)
            t2 = t1 + datetime.timedelta(milliseconds=200)
            node = setpoint(c)
            for t, v in ((t1, 10.0), (t2, 20.0)):
                await node.write_value(
                    ua.DataValue(ua.Variant(v, ua.VariantType.Double), SourceTimestamp=t)
                )
            await wait_values(node, t1, 2)
            d = ua.ReadAtTimeDetails()
            d.ReqTimes = [t1, t1 + datetime.timedelta(milliseconds=50), t2 + datetime.timedelta(seconds=1)]
            d.UseSimpleBounds = True
            r = await history_read(c, d, "ns=1;s=Demo.History.Setpoint")
            at = r.HistoryData.DataValues
            assert at[0].Value.Value == 10.0 and at[0].StatusCode.is_good(), "the raw value"
            assert abs(at[1].Value.Value - 12.5) < 1e-9, at[1].Value.Value
            assert at[1].StatusCode.value & 0x3 == 0x2, "HistorianInterpolated"
            assert at[2].Value.Value == 20.0, "after the last value: stepped extrapolation"
            assert at[2].StatusCode.is_uncertain()

    run(body())


def test_processed_reads_compute_aggregates(hist_server):
    async def body():
        async with session(hist_server.url) as c:
            start = datetime.datetime.now(UTC)
            await asyncio.sleep(0.01)
            await write_values(c, [1.0, 3.0])
            vals = await wait_written(setpoint(c), start, [1.0, 3.0])
            assert [v.Value.Value for v in vals] == [1.0, 3.0]
            t1 = vals[0].SourceTimestamp
            d = ua.ReadProcessedDetails()
            d.StartTime = t1
            d.EndTime = vals[-1].SourceTimestamp + datetime.timedelta(milliseconds=1)
            d.ProcessingInterval = 0.0
            d.AggregateType = [ua.NodeId(ua.ObjectIds.AggregateFunction_MinimumActualTime)]
            d.AggregateConfiguration = ua.AggregateConfiguration()
            d.AggregateConfiguration.UseServerCapabilitiesDefaults = True
            r = await history_read(c, d, "ns=1;s=Demo.History.Setpoint")
            assert r.StatusCode.is_good(), r.StatusCode
            out = r.HistoryData.DataValues
            assert len(out) == 1
            assert out[0].Value.Value == 1.0
            assert out[0].SourceTimestamp == t1, "MinimumActualTime stamps the minimum's time"
            # An aggregate the server does not compute.
            d.AggregateType = [ua.NodeId(ua.ObjectIds.AggregateFunction_AnnotationCount)]
            r = await history_read(c, d, "ns=1;s=Demo.History.Setpoint")
            assert r.StatusCode.value == ua.StatusCodes.BadAggregateNotSupported

    run(body())


def test_capabilities_say_what_is_served(hist_server):
    async def body():
        async with session(hist_server.url) as c:
            caps = c.get_node(ua.ObjectIds.HistoryServerCapabilities)
            access = await c.get_node(
                ua.ObjectIds.HistoryServerCapabilities_AccessHistoryDataCapability
            ).read_value()
            assert access is True
            for cap in (
                ua.ObjectIds.HistoryServerCapabilities_InsertDataCapability,
                ua.ObjectIds.HistoryServerCapabilities_ReplaceDataCapability,
                ua.ObjectIds.HistoryServerCapabilities_DeleteRawCapability,
                ua.ObjectIds.HistoryServerCapabilities_InsertEventCapability,
                ua.ObjectIds.HistoryServerCapabilities_ReplaceEventCapability,
                ua.ObjectIds.HistoryServerCapabilities_UpdateEventCapability,
                ua.ObjectIds.HistoryServerCapabilities_DeleteEventCapability,
            ):
                assert await c.get_node(cap).read_value() is True
            # Annotations are not kept.
            assert (
                await c.get_node(
                    ua.ObjectIds.HistoryServerCapabilities_InsertAnnotationCapability
                ).read_value()
                is False
            )
            events = await c.get_node(
                ua.ObjectIds.HistoryServerCapabilities_AccessHistoryEventsCapability
            ).read_value()
            assert events is True
            folder = c.get_node(ua.ObjectIds.HistoryServerCapabilities_AggregateFunctions)
            names = {(await n.read_browse_name()).Name for n in await folder.get_children()}
            # Every Part 13 AggregateFunction asyncua names but AnnotationCount (no Annotations).
            prefix = "AggregateFunction_"
            part13 = {k[len(prefix):] for k in dir(ua.ObjectIds)
                      if k.startswith(prefix) and "_" not in k[len(prefix):]}
            assert names == part13 - {"AnnotationCount"}, names ^ (part13 - {"AnnotationCount"})
            assert await caps.read_browse_name()

    run(body())


def test_the_server_objects_events_are_kept_and_read_with_a_filter(hist_server):
    async def body():
        async with session(hist_server.url) as c:
            server = c.get_node(ua.ObjectIds.Server)
            notifier = (await server.read_attribute(ua.AttributeIds.EventNotifier)).Value.Value
            assert notifier & 0x04, "EventNotifier HistoryRead"
            start = datetime.datetime.now(UTC)
            await asyncio.sleep(0.01)
            methods = c.get_node("ns=1;s=Demo.Methods")
            for i, sev in enumerate((300, 700, 900)):
                await methods.call_method(
                    ua.NodeId("Demo.Methods.GenerateEvent", 1),
                    ua.Variant(f"history event {i}", ua.VariantType.String),
                    ua.Variant(sev, ua.VariantType.UInt16),
                )
            end = datetime.datetime.now(UTC) + datetime.timedelta(seconds=1)
            deadline = asyncio.get_running_loop().time() + 10
            while True:
                # asyncua's read_event_history: BaseEventType's fields, every event.
                evs = await server.read_event_history(start, end)
                mine = [e for e in evs if str(e.Message.Text).startswith("history event")]
                if len(mine) >= 3 or asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert [e.Message.Text for e in mine] == [f"history event {i}" for i in range(3)]
            assert [e.Severity for e in mine] == [300, 700, 900]
            times = [e.Time for e in mine]
            assert times == sorted(times)
            # A where clause: Severity >= 700 (the server applies it to the stored events).
            f = ua.EventFilter()
            for name in ("Message", "Severity"):
                op = ua.SimpleAttributeOperand()
                op.TypeDefinitionId = ua.NodeId(ua.ObjectIds.BaseEventType)
                op.BrowsePath = [ua.QualifiedName(name, 0)]
                op.AttributeId = ua.AttributeIds.Value
                f.SelectClauses.append(op)
            el = ua.ContentFilterElement()
            el.FilterOperator = ua.FilterOperator.GreaterThanOrEqual
            sev = ua.SimpleAttributeOperand()
            sev.TypeDefinitionId = ua.NodeId(ua.ObjectIds.BaseEventType)
            sev.BrowsePath = [ua.QualifiedName("Severity", 0)]
            sev.AttributeId = ua.AttributeIds.Value
            lit = ua.LiteralOperand()
            lit.Value = ua.Variant(700, ua.VariantType.UInt16)
            el.FilterOperands = [sev, lit]
            f.WhereClause.Elements = [el]
            d = ua.ReadEventDetails()
            d.StartTime = start
            d.EndTime = end
            d.NumValuesPerNode = 0
            d.Filter = f
            r = await history_read(c, d, "i=2253")
            assert r.StatusCode.is_good(), r.StatusCode
            got = [
                (fl.EventFields[0].Value.Text, fl.EventFields[1].Value)
                for fl in r.HistoryData.Events
                if str(fl.EventFields[0].Value.Text).startswith("history event")
            ]
            assert got == [("history event 1", 700), ("history event 2", 900)]
            # Newest first: end before start.
            d.StartTime, d.EndTime = end, start
            r = await history_read(c, d, "i=2253")
            sevs = [fl.EventFields[1].Value for fl in r.HistoryData.Events
                    if str(fl.EventFields[0].Value.Text).startswith("history event")]
            assert sevs == [900, 700]
            # A notifier whose events are not kept.
            r = await history_read(c, d, "ns=1;s=Demo.Static.Double")
            assert r.StatusCode.value == ua.StatusCodes.BadHistoryOperationUnsupported

    run(body())


def test_history_update_inserts_replaces_and_deletes(hist_server):
    async def body():
        async with session(hist_server.url) as c:
            t0 = datetime.datetime.now(UTC).replace(microsecond=0) + datetime.timedelta(minutes=5)
            ts = [t0 + datetime.timedelta(seconds=i) for i in range(4)]

            def dv(t, v):
                return ua.DataValue(ua.Variant(v, ua.VariantType.Double), SourceTimestamp=t)

            def update(mode, values):
                d = ua.UpdateDataDetails()
                d.NodeId = ua.NodeId.from_string("ns=1;s=Demo.History.Setpoint")
                d.PerformInsertReplace = mode
                d.UpdateValues = values
                return d

            p = ua.HistoryUpdateParameters()
            p.HistoryUpdateDetails = [
                update(ua.PerformUpdateType.Insert, [dv(t, float(i)) for i, t in enumerate(ts)]),
            ]
            r = await c.uaclient.history_update(p)
            assert [s.value for s in r[0].OperationResults] == [ua.StatusCodes.GoodEntryInserted] * 4
            p.HistoryUpdateDetails = [
                update(ua.PerformUpdateType.Replace, [dv(ts[1], 11.0)]),
                update(ua.PerformUpdateType.Insert, [dv(ts[2], 22.0)]),
            ]
            d = ua.DeleteAtTimeDetails()
            d.NodeId = ua.NodeId.from_string("ns=1;s=Demo.History.Setpoint")
            d.ReqTimes = [ts[3]]
            p.HistoryUpdateDetails.append(d)
            r = await c.uaclient.history_update(p)
            assert [s.value for s in r[0].OperationResults] == [ua.StatusCodes.GoodEntryReplaced]
            assert [s.value for s in r[1].OperationResults] == [ua.StatusCodes.BadEntryExists]
            assert [s.value for s in r[2].OperationResults] == [ua.StatusCodes.Good]
            vals = await setpoint(c).read_raw_history(t0, t0 + datetime.timedelta(seconds=10), return_bounds=False)
            assert [v.Value.Value for v in vals] == [0.0, 11.0, 2.0]
            # Each was inserted (and 11.0 replaced 1.0) by HistoryUpdate, so each hides modified
            # values: the ExtraData bit (InfoType DataValue 0x400, ExtraData 0x8; Part 11 §6.5.3.2).
            assert all(v.StatusCode.value & 0x0408 == 0x0408 for v in vals), [v.StatusCode for v in vals]
            dr = ua.DeleteRawModifiedDetails()
            dr.NodeId = ua.NodeId.from_string("ns=1;s=Demo.History.Setpoint")
            dr.IsDeleteModified = False
            dr.StartTime = t0
            dr.EndTime = t0 + datetime.timedelta(seconds=10)
            p.HistoryUpdateDetails = [dr]
            r = await c.uaclient.history_update(p)
            assert r[0].StatusCode.is_good()
            vals = await setpoint(c).read_raw_history(t0, t0 + datetime.timedelta(seconds=10), return_bounds=False)
            assert vals == []

    run(body())


def test_variables_named_in_the_configuration_are_historized(hist_server):
    async def body():
        async with session(hist_server.url) as c:
            start = datetime.datetime.now(UTC)
            await asyncio.sleep(0.01)
            i32 = c.get_node("ns=1;s=Demo.Static.Int32")
            for v in (7, 8, 9):
                await i32.write_value(ua.DataValue(ua.Variant(v, ua.VariantType.Int32)))
            vals = await wait_values(i32, start, 3)
            assert [v.Value.Value for v in vals] == [7, 8, 9]
            arr = c.get_node("ns=1;s=Demo.Static.Arrays.UInt16")
            assert (await arr.read_attribute(ua.AttributeIds.Historizing)).Value.Value is True
            await arr.write_value(ua.DataValue(ua.Variant([1, 2, 3], ua.VariantType.UInt16)))
            vals = await wait_values(arr, start, 1)
            assert vals[-1].Value.Value == [1, 2, 3]
            other = c.get_node("ns=1;s=Demo.Static.Arrays.Int16")
            assert (await other.read_attribute(ua.AttributeIds.Historizing)).Value.Value is False

    run(body())


def test_a_computed_variable_is_historized_on_its_interval(hist_server):
    """[[history.sampled]] on Demo.Dynamic.Counter, a computed UInt32 (+1 every 100 ms): the
    sampler computes it every 200 ms and keeps each value, so its raw history rises by about
    two a value, about five values a second, and says Historizing."""

    async def body():
        async with session(hist_server.url) as c:
            counter = c.get_node("ns=1;s=Demo.Dynamic.Counter")
            assert (await counter.read_attribute(ua.AttributeIds.Historizing)).Value.Value is True
            start = datetime.datetime.now(UTC)
            await asyncio.sleep(1.5)
            vals = await wait_values(counter, start, 4, timeout=20.0)
            kept = [v.Value.Value for v in vals]
            assert len(kept) >= 4, kept
            assert all(b > a for a, b in zip(kept, kept[1:])), kept
            steps = [b - a for a, b in zip(kept, kept[1:])]
            assert sum(steps) / len(steps) >= 1.5, steps

    run(body())


def test_a_collection_rule_keeps_values_beyond_its_deviation(hist_server):
    """[[history.collection]] with an ExceptionDeviation of 10 on Demo.Static.UInt32: of 100,
    105, 111, 115, 130 written, the values more than 10 from the last one kept are kept; its
    HA Configuration says so (ExceptionDeviation, ExceptionDeviationFormat AbsoluteValue)."""

    async def body():
        async with session(hist_server.url) as c:
            u32 = c.get_node("ns=1;s=Demo.Static.UInt32")
            start = datetime.datetime.now(UTC)
            await asyncio.sleep(0.01)
            for v in (100, 105, 111, 115, 130):
                await u32.write_value(ua.DataValue(ua.Variant(v, ua.VariantType.UInt32)))
            deadline = time.monotonic() + 20
            while True:
                end = datetime.datetime.now(UTC) + datetime.timedelta(seconds=5)
                vals = await u32.read_raw_history(start, end, return_bounds=False)
                kept = [v.Value.Value for v in vals]
                if kept[-1:] == [130] or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert kept == [100, 111, 130], kept
            [ref] = await u32.get_references(refs=ua.ObjectIds.HasHistoricalConfiguration)
            config = c.get_node(ref.NodeId)
            deviation = await config.get_child("0:ExceptionDeviation")
            assert await deviation.read_value() == 10.0
            fmt = await config.get_child("0:ExceptionDeviationFormat")
            assert await fmt.read_value() == 0  # AbsoluteValue
            stepped = await config.get_child("0:Stepped")
            assert await stepped.read_value() is True

    run(body())


def test_variables_sampled_on_an_interval_keep_one_value_an_interval(hist_server):
    """[[history.sampled]]: Demo.Static.Float is sampled every 300 ms instead of recorded by
    change. Twenty writes in a burst keep one value per sampling pass they straddle, the last
    written among them; a value that does not change is not stored again."""

    async def body():
        async with session(hist_server.url) as c:
            f = c.get_node("ns=1;s=Demo.Static.Float")
            assert (await f.read_attribute(ua.AttributeIds.Historizing)).Value.Value is True
            start = datetime.datetime.now(UTC)
            await asyncio.sleep(0.01)
            t0 = time.monotonic()
            for i in range(20):
                await f.write_value(ua.DataValue(ua.Variant(float(i), ua.VariantType.Float)))
            burst_ms = (time.monotonic() - t0) * 1000

            async def last_is_19():
                end = datetime.datetime.now(UTC) + datetime.timedelta(seconds=5)
                vals = await f.read_raw_history(start, end, return_bounds=False)
                return vals if vals and vals[-1].Value.Value == 19.0 else None

            deadline = time.monotonic() + 20
            vals = None
            while vals is None and time.monotonic() < deadline:
                vals = await last_is_19()
                if vals is None:
                    await asyncio.sleep(0.1)
            assert vals is not None, "the last value written was sampled"
            kept = [v.Value.Value for v in vals]
            assert len(kept) <= burst_ms / 300 + 2 and len(kept) < 20, (kept, burst_ms)
            assert kept == sorted(kept), kept
            # Three more passes without a change: nothing more is stored.
            await asyncio.sleep(1.0)
            end = datetime.datetime.now(UTC) + datetime.timedelta(seconds=5)
            again = await f.read_raw_history(start, end, return_bounds=False)
            assert [v.Value.Value for v in again] == kept

    run(body())


def test_events_of_a_configured_notifier_are_kept(hist_server):
    """`[history] event_notifiers`: Demo.Events keeps the events reported on it (the Demo
    events, raised once a second), read back with asyncua's read_event_history; its parent
    Demo, not named, keeps none."""

    async def body():
        async with session(hist_server.url) as c:
            events = c.get_node("ns=1;s=Demo.Events")
            notifier = await events.read_event_notifier()
            assert ua.EventNotifier.HistoryRead in notifier, notifier
            demo = await c.get_node("ns=1;s=Demo").read_event_notifier()
            assert ua.EventNotifier.HistoryRead not in demo, demo
            start = datetime.datetime.now(UTC) - datetime.timedelta(minutes=5)
            deadline = time.monotonic() + 20
            got = []
            while time.monotonic() < deadline:
                end = datetime.datetime.now(UTC) + datetime.timedelta(seconds=5)
                got = [
                    e
                    for e in await events.read_event_history(start, end)
                    if e.Message and (e.Message.Text or "").startswith("Demo event")
                ]
                if len(got) >= 2:
                    break
                await asyncio.sleep(0.2)
            assert len(got) >= 2, got
            assert all(e.SourceNode == events.nodeid for e in got), got

    run(body())


def test_a_variable_without_history_says_so(hist_server):
    async def body():
        async with session(hist_server.url) as c:
            start = datetime.datetime.now(UTC) - datetime.timedelta(minutes=1)
            end = datetime.datetime.now(UTC)
            r = await history_read(c, raw_details(start, end), "ns=1;s=Demo.Static.Double")
            assert r.StatusCode.value == ua.StatusCodes.BadNotReadable

    run(body())


def test_without_a_store_history_read_is_unsupported(tmp_path):
    cfg = tmp_path / "nohistory.toml"
    cfg.write_text("[history]\nenabled = false\n")
    s = Server("--config", str(cfg), "--pki", str(tmp_path / "pki"))
    try:
        async def body():
            async with session(s.url) as c:
                start = datetime.datetime.now(UTC) - datetime.timedelta(minutes=1)
                with pytest.raises(ua.UaStatusCodeError) as e:
                    await history_read(
                        c, raw_details(start, datetime.datetime.now(UTC)), "ns=1;s=Demo.History.Count"
                    )
                assert e.value.code == ua.StatusCodes.BadServiceUnsupported
                # Without a store the HistoryServerCapabilities object is not there.
                with pytest.raises(ua.UaStatusCodeError) as e:
                    await c.get_node(
                        ua.ObjectIds.HistoryServerCapabilities_AccessHistoryDataCapability
                    ).read_value()
                assert e.value.code == ua.StatusCodes.BadNodeIdUnknown, e.value

        run(body())
    finally:
        assert s.stop() == 0


@pytest.fixture(scope="module")
def user_server(tmp_path_factory):
    import subprocess
    from conftest import uaring_bin
    root = tmp_path_factory.mktemp("uaring-history-users")
    pw = subprocess.run([uaring_bin(), "hash-password"], input="op-pw\n", capture_output=True,
                        text=True, check=True).stdout.strip()
    cfg = root / "uaring.toml"
    cfg.write_text(
        f'[history]\nenabled = true\ndir = "{root / "store"}"\nflush_interval_ms = 100\n'
        f'[[users]]\nname = "operator"\npassword = "{pw}"\nroles = ["Operator"]\n'
    )
    s = Server("--config", str(cfg), "--pki", str(root / "pki"))
    yield s
    assert s.stop() == 0


def test_modified_values_name_the_user_who_made_them(user_server):
    """A value a logged-in user replaces is kept as a modified value whose ModificationInfo
    names that user; asyncua reads it with isReadModified (HistoryModifiedData)."""
    from asyncua import Client

    async def body():
        c = Client(user_server.url, timeout=10)
        c.set_user("operator")
        c.set_password("op-pw")
        await c.connect()
        try:
            t0 = datetime.datetime.now(UTC).replace(microsecond=0) + datetime.timedelta(minutes=7)
            node = ua.NodeId.from_string("ns=1;s=Demo.History.Setpoint")

            def update(mode, v):
                d = ua.UpdateDataDetails()
                d.NodeId = node
                d.PerformInsertReplace = mode
                d.UpdateValues = [ua.DataValue(ua.Variant(v, ua.VariantType.Double), SourceTimestamp=t0)]
                return d

            p = ua.HistoryUpdateParameters()
            p.HistoryUpdateDetails = [update(ua.PerformUpdateType.Insert, 1.0),
                                      update(ua.PerformUpdateType.Replace, 2.0)]
            r = await c.uaclient.history_update(p)
            assert [s.value for x in r for s in x.OperationResults] == [
                ua.StatusCodes.GoodEntryInserted, ua.StatusCodes.GoodEntryReplaced]
            d = ua.ReadRawModifiedDetails()
            d.IsReadModified = True
            d.StartTime = t0
            d.EndTime = t0 + datetime.timedelta(seconds=1)
            d.NumValuesPerNode = 0
            d.ReturnBounds = False
            res = await history_read(c, d, "ns=1;s=Demo.History.Setpoint")
            assert res.StatusCode.is_good()
            h = res.HistoryData
            assert [v.Value.Value for v in h.DataValues] == [1.0, 1.0]
            infos = h.ModificationInfos
            assert [i.UpdateType for i in infos] == [ua.HistoryUpdateType.Insert, ua.HistoryUpdateType.Replace]
            assert all(i.UserName == "operator" for i in infos)
        finally:
            await c.disconnect()

    run(body())
