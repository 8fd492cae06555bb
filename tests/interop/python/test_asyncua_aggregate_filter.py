"""asyncua (PyPI) monitored items with an AggregateFilter against the real uaring binary:
Average and Count over 500 ms of Demo.Dynamic.Counter (+1 every 100 ms), the
AggregateFilterResult, one Calculated value per interval stamped with the interval start,
and the refusals (an Aggregate the server does not compute, a String variable).

Raw requests and hand-sent Publish requests (test_asyncua_subscriptions.Raw), so every
notification is seen exactly as the server sent it.
"""
import asyncio
import datetime

from asyncua import ua

from conftest import connected
from test_asyncua_subscriptions import Raw, STRING, run

COUNTER = ua.NodeId("Demo.Dynamic.Counter", 1)
DATA_VALUE_INFO = 0x0400  # InfoType DataValue: the aggregate bits are valid
CALCULATED = 0x01
UTC = datetime.timezone.utc


def aggregate_filter(aggregate, interval_ms, start):
    f = ua.AggregateFilter()
    f.StartTime = start
    f.AggregateType = ua.NodeId(aggregate)
    f.ProcessingInterval = interval_ms
    f.AggregateConfiguration = ua.AggregateConfiguration(UseServerCapabilitiesDefaults=True)
    return f


def test_average_and_count_over_500_ms(server):
    async def main():
        c = await connected(server.url)
        try:
            raw = Raw(c)
            sub = await raw.create_subscription(interval=100.0, keep_alive=50)
            start = datetime.datetime.now(UTC).replace(microsecond=0) + datetime.timedelta(seconds=1)
            results = await raw.create_items(
                sub.SubscriptionId,
                [
                    {"node": COUNTER, "handle": 1, "sampling": 100.0, "queue": 10,
                     "filter": aggregate_filter(ua.ObjectIds.AggregateFunction_Average, 500.0, start)},
                    {"node": COUNTER, "handle": 2, "sampling": 100.0, "queue": 10,
                     "filter": aggregate_filter(ua.ObjectIds.AggregateFunction_Count, 500.0, start)},
                    {"node": COUNTER, "handle": 3, "sampling": 100.0,
                     "filter": aggregate_filter(ua.ObjectIds.AggregateFunction_AnnotationCount, 500.0, start)},
                    {"node": STRING, "handle": 4, "sampling": 100.0,
                     "filter": aggregate_filter(ua.ObjectIds.AggregateFunction_Average, 500.0, start)},
                ],
            )
            for r in results[:2]:
                r.StatusCode.check()
                assert r.RevisedSamplingInterval == 100.0
                fr = r.FilterResult
                assert isinstance(fr, ua.AggregateFilterResult), fr
                assert fr.RevisedProcessingInterval == 500.0
                assert fr.RevisedStartTime.replace(tzinfo=UTC) == start, (fr.RevisedStartTime, start)
                assert fr.RevisedAggregateConfiguration.TreatUncertainAsBad is True
            assert results[2].StatusCode.value == ua.StatusCodes.BadAggregateNotSupported
            assert results[3].StatusCode.value == ua.StatusCodes.BadFilterNotAllowed

            got = {1: [], 2: []}
            deadline = asyncio.get_running_loop().time() + 20
            acks = []
            while min(len(v) for v in got.values()) < 5:
                assert asyncio.get_running_loop().time() < deadline, got
                resp = await raw.publish(acks)
                msg = resp.Parameters.NotificationMessage
                if msg.NotificationData:
                    acks = [ua.SubscriptionAcknowledgement(SubscriptionId=sub.SubscriptionId,
                                                           SequenceNumber=msg.SequenceNumber)]
                for nd in msg.NotificationData:
                    if isinstance(nd, ua.DataChangeNotification):
                        for m in nd.MonitoredItems:
                            got[m.ClientHandle].append(m.Value)

            for handle, values in got.items():
                stamps = [v.SourceTimestamp.replace(tzinfo=UTC) for v in values]
                assert stamps[0] == start, (handle, stamps[0], start)
                for a, b in zip(stamps, stamps[1:]):
                    assert b - a == datetime.timedelta(milliseconds=500), (handle, stamps)
                for v in values:
                    s = v.StatusCode.value
                    assert s & DATA_VALUE_INFO and s & 0x3 == CALCULATED, (handle, hex(s))
                    assert not ua.StatusCode(s).is_bad(), (handle, hex(s))
            # The counter steps +1 every 100 ms, sampled every 100 ms: about 5 values per
            # interval (a tick late on a loaded machine can miss a step), and the average of one
            # interval about 5 above the previous one.
            counts = [v.Value.Value for v in got[2]]
            assert all(2 <= n <= 6 for n in counts), counts
            averages = [v.Value.Value for v in got[1]]
            for a, b in zip(averages, averages[1:]):
                assert 3.0 <= b - a <= 7.0, averages
        finally:
            await c.disconnect()

    run(main())


def test_server_capabilities_list_the_aggregates(server):
    """ServerCapabilities.AggregateFunctions lists what an AggregateFilter computes: every
    AggregateFunction of Part 13 that asyncua's ObjectIds name but AnnotationCount (the server
    keeps no Annotations)."""
    async def main():
        c = await connected(server.url)
        try:
            folder = c.get_node(ua.ObjectIds.Server_ServerCapabilities_AggregateFunctions)
            names = {(await n.read_browse_name()).Name for n in await folder.get_children()}
            prefix = "AggregateFunction_"
            part13 = {k[len(prefix):] for k in dir(ua.ObjectIds)
                      if k.startswith(prefix) and "_" not in k[len(prefix):]}
            assert len(part13) == 37, part13
            assert names == part13 - {"AnnotationCount"}, names ^ (part13 - {"AnnotationCount"})
        finally:
            await c.disconnect()

    run(main())
