"""asyncua (PyPI) events, conditions and methods against the real uaring binary.

Event subscriptions on the Server object and on Demo.Events with select and where clauses,
events raised on demand by Demo.Methods.GenerateEvent, the session audit events, the Demo
alarm (ConditionRefresh, Acknowledge, Confirm), the Call service's argument validation, and
Server.GetMonitoredItems / ResendData.
"""
import asyncio

import pytest
from asyncua import Client, ua
from asyncua.common.events import Event
from asyncua.ua.ua_binary import struct_from_binary

from test_asyncua_subscriptions import Raw, values

SERVER = ua.NodeId(2253, 0)
DEMO_EVENTS = ua.NodeId("Demo.Events", 1)
METHODS = ua.NodeId("Demo.Methods", 1)
ALARM = ua.NodeId("Demo.Events.Alarm", 1)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


def select(*names, type_id=ua.NodeId(2041, 0), attr=ua.AttributeIds.Value):
    op = ua.SimpleAttributeOperand()
    op.TypeDefinitionId = type_id
    op.BrowsePath = [ua.QualifiedName(n, 0) if ":" not in n else ua.QualifiedName(n.split(":")[1], int(n.split(":")[0])) for n in names]
    op.AttributeId = attr
    return op


def base_filter(where=None):
    f = ua.EventFilter()
    f.SelectClauses = [select("EventType"), select("SourceName"), select("Message"), select("Severity"), select("EventId")]
    if where is not None:
        f.WhereClause = where
    return f


def severity_at_least(n):
    el = ua.ContentFilterElement()
    el.FilterOperator = ua.FilterOperator.GreaterThanOrEqual
    el.FilterOperands = [select("Severity"), ua.LiteralOperand(Value=ua.Variant(n, ua.VariantType.UInt16))]
    cf = ua.ContentFilter()
    cf.Elements = [el]
    return cf


async def event_items(r, sub_id, specs):
    items = []
    for i, (node, flt) in enumerate(specs):
        p = ua.MonitoringParameters(ClientHandle=100 + i, SamplingInterval=0, Filter=flt, QueueSize=100, DiscardOldest=True)
        items.append(ua.MonitoredItemCreateRequest(ItemToMonitor=ua.ReadValueId(NodeId=node, AttributeId=ua.AttributeIds.EventNotifier), MonitoringMode=ua.MonitoringMode.Reporting, RequestedParameters=p))
    req = ua.CreateMonitoredItemsRequest()
    req.Parameters = ua.CreateMonitoredItemsParameters(SubscriptionId=sub_id, TimestampsToReturn=ua.TimestampsToReturn.Both, ItemsToCreate=items)
    resp = await r.send(req, ua.CreateMonitoredItemsResponse)
    resp.ResponseHeader.ServiceResult.check()
    return resp.Results


def events_of(resp):
    out = []
    for n in resp.Parameters.NotificationMessage.NotificationData:
        if isinstance(n, ua.EventNotificationList):
            out.extend((e.ClientHandle, [f.Value for f in e.EventFields]) for e in n.Events)
    return out


async def collect_events(r, pred, tries=40):
    got = []
    for _ in range(tries):
        got += events_of(await r.publish())
        if pred(got):
            return got
    raise AssertionError(f"events not seen: {got}")


async def generate(c, message, severity):
    await c.get_node(METHODS).call_method(ua.NodeId("Demo.Methods.GenerateEvent", 1), ua.Variant(message, ua.VariantType.String), ua.Variant(severity, ua.VariantType.UInt16))


def test_events_with_select_and_where_clauses(server):
    async def body():
        async with Client(server.url, timeout=10) as c:
            r = Raw(c)
            sub = await r.create_subscription(interval=50)
            res = await event_items(r, sub.SubscriptionId, [(SERVER, base_filter()), (DEMO_EVENTS, base_filter(severity_at_least(600)))])
            assert all(x.StatusCode.is_good() for x in res), res
            await generate(c, "low", 300)
            await generate(c, "high", 900)
            got = await collect_events(r, lambda g: any(f[2].Text == "high" and h == 100 for (h, f) in g) and any(h == 101 for (h, _) in g))
            server_msgs = [f[2].Text for (h, f) in got if h == 100 and f[1] == "Events" and f[2].Text in ("low", "high")]
            demo_msgs = [f[2].Text for (h, f) in got if h == 101 and f[2].Text in ("low", "high")]
            assert server_msgs == ["low", "high"]
            assert demo_msgs == ["high"], "the where clause drops Severity 300"
            high = next(f for (h, f) in got if h == 100 and f[2].Text == "high")
            assert high[3] == 900 and isinstance(high[4], bytes) and len(high[4]) == 16
            assert high[0] == ua.NodeId("DemoEventType", 1)

    run(body())


def test_high_level_event_subscription_and_session_events(server):
    class Handler:
        def __init__(self):
            self.events = []

        def event_notification(self, event: Event):
            self.events.append(event)

    async def body():
        async with Client(server.url, timeout=10) as c:
            h = Handler()
            sub = await c.create_subscription(50, h)
            await sub.subscribe_events(c.get_node(SERVER), ua.NodeId(2041, 0))
            await generate(c, "from asyncua", 500)
            async with Client(server.url, timeout=10):
                pass  # a session created and closed: two audit events
            for _ in range(100):
                types = {e.EventType for e in h.events}
                if ua.NodeId(2071, 0) in types and ua.NodeId(2069, 0) in types and any(getattr(e, "Message", None) and e.Message.Text == "from asyncua" for e in h.events):
                    break
                await asyncio.sleep(0.05)
            types = {e.EventType for e in h.events}
            assert ua.NodeId(2071, 0) in types, "AuditCreateSessionEventType"
            assert ua.NodeId(2069, 0) in types, "AuditSessionEventType (closed)"
            assert any(e.Message.Text == "from asyncua" and e.Severity == 500 for e in h.events if getattr(e, "Message", None))
            await sub.delete()

    run(body())


def test_invalid_event_filters(server):
    async def body():
        async with Client(server.url, timeout=10) as c:
            r = Raw(c)
            sub = await r.create_subscription(interval=100)
            bad_type = base_filter()
            bad_type.SelectClauses.append(select("Message", type_id=ua.NodeId(58, 0)))  # BaseObjectType: not an event type
            el = ua.ContentFilterElement()
            el.FilterOperator = ua.FilterOperator.RelatedTo
            el.FilterOperands = [select("Severity"), select("Severity")]
            unsupported = base_filter(ua.ContentFilter(Elements=[el]))
            res = await event_items(r, sub.SubscriptionId, [(SERVER, bad_type), (SERVER, unsupported), (ua.NodeId("Demo.Static.Int32", 1), base_filter())])
            # A bad select clause is reported per clause; the item is still created.
            assert res[0].StatusCode.is_good()
            fr = res[0].FilterResult
            assert fr.SelectClauseResults[-1].value == ua.StatusCodes.BadTypeDefinitionInvalid
            assert res[1].StatusCode.value in (ua.StatusCodes.BadEventFilterInvalid, ua.StatusCodes.BadFilterOperatorUnsupported)
            assert res[1].FilterResult.WhereClauseResult.ElementResults[0].StatusCode.value == ua.StatusCodes.BadFilterOperatorUnsupported
            assert res[2].StatusCode.value == ua.StatusCodes.BadAttributeIdInvalid, "a variable is no event notifier"

    run(body())


def test_call_service_validation(server):
    async def body():
        async with Client(server.url, timeout=10) as c:
            methods = c.get_node(METHODS)
            add = ua.NodeId("Demo.Methods.Add", 1)
            assert await methods.call_method(add, ua.Variant(2.5, ua.VariantType.Double), ua.Variant(4.0, ua.VariantType.Double)) == 6.5

            def call(args, method=add, obj=METHODS):
                req = ua.CallMethodRequest()
                req.ObjectId = obj
                req.MethodId = method
                req.InputArguments = args
                return req

            results = await c.uaclient.call(
                [
                    call([ua.Variant(1.0, ua.VariantType.Double)]),
                    call([ua.Variant(1.0, ua.VariantType.Double)] * 3),
                    call([ua.Variant("x", ua.VariantType.String), ua.Variant(1.0, ua.VariantType.Double)]),
                    call([], method=ua.NodeId("Demo.Events.Alarm.Acknowledge", 1)),
                    call([], method=ua.NodeId("No.Such.Method", 1)),
                    call([ua.Variant([1.0, 2.0, 3.5], ua.VariantType.Double)], method=ua.NodeId("Demo.Methods.Sum", 1)),
                ]
            )
            assert results[0].StatusCode.value == ua.StatusCodes.BadArgumentsMissing
            assert results[1].StatusCode.value == ua.StatusCodes.BadTooManyArguments
            assert results[2].StatusCode.value == ua.StatusCodes.BadInvalidArgument
            assert results[2].InputArgumentResults[0].value == ua.StatusCodes.BadTypeMismatch
            assert results[2].InputArgumentResults[1].is_good()
            assert results[3].StatusCode.value == ua.StatusCodes.BadMethodInvalid
            assert results[4].StatusCode.value in (ua.StatusCodes.BadMethodInvalid, ua.StatusCodes.BadNodeIdUnknown)
            assert results[5].StatusCode.is_good() and results[5].OutputArguments[0].Value == 6.5

    run(body())


def test_get_monitored_items_and_resend_data(server):
    async def body():
        async with Client(server.url, timeout=10) as c:
            r = Raw(c)
            sub = await r.create_subscription(interval=50)
            res = await r.create_items(sub.SubscriptionId, [{"node": ua.NodeId("Demo.Static.Int32", 1), "handle": 41}, {"node": ua.NodeId("Demo.Static.Double", 1), "handle": 42}])
            await r.publish_data()
            server_node = c.get_node(SERVER)
            out = await server_node.call_method(ua.NodeId(11492, 0), ua.Variant(sub.SubscriptionId, ua.VariantType.UInt32))
            server_handles, client_handles = out
            assert sorted(server_handles) == sorted(x.MonitoredItemId for x in res)
            assert sorted(client_handles) == [41, 42]
            with pytest.raises(ua.uaerrors.BadSubscriptionIdInvalid):
                await server_node.call_method(ua.NodeId(11492, 0), ua.Variant(999999, ua.VariantType.UInt32))
            await server_node.call_method(ua.NodeId(12873, 0), ua.Variant(sub.SubscriptionId, ua.VariantType.UInt32))
            got = values(await r.publish_data())
            assert sorted(h for (h, _, _) in got) == [41, 42], "ResendData queues every current value"

    run(body())


def test_condition_refresh_acknowledge_and_confirm(server):
    async def body():
        async with Client(server.url, timeout=10) as c:
            r = Raw(c)
            sub = await r.create_subscription(interval=50)
            f = ua.EventFilter()
            f.SelectClauses = [
                select("EventType"),
                select("EventId"),
                select("AckedState", "Id", type_id=ua.NodeId(2881, 0)),
                select("ConfirmedState", "Id", type_id=ua.NodeId(2881, 0)),
                select("ActiveState", "Id", type_id=ua.NodeId(2915, 0)),
                select("Retain", type_id=ua.NodeId(2782, 0)),
                select(type_id=ua.NodeId(2782, 0), attr=ua.AttributeIds.NodeId),
            ]
            res = await event_items(r, sub.SubscriptionId, [(DEMO_EVENTS, f)])
            assert res[0].StatusCode.is_good()
            # Wait until the alarm is active (it toggles every 10 s from the server start).
            active = c.get_node(ua.NodeId("Demo.Events.Alarm.ActiveState.Id", 1))
            for _ in range(250):
                if await active.read_value():
                    break
                await asyncio.sleep(0.1)
            assert await active.read_value(), "the Demo alarm went active"
            await c.get_node(ua.NodeId(2782, 0)).call_method(ua.NodeId(3875, 0), ua.Variant(sub.SubscriptionId, ua.VariantType.UInt32))
            got = await collect_events(r, lambda g: any(f[0] == ua.NodeId(2788, 0) for (_, f) in g))
            types = [f[0] for (_, f) in got]
            start, end = types.index(ua.NodeId(2787, 0)), types.index(ua.NodeId(2788, 0))
            between = [f for (_, f) in got[start + 1 : end]]
            alarm = [f for f in between if f[6] == ALARM]
            assert alarm, f"the retained alarm is in the refresh: {got}"
            ev = alarm[-1]
            assert ev[4] is True and ev[5] is True
            assert ev[2] is False, "an active alarm starts unacknowledged"
            alarm_node = c.get_node(ALARM)
            await alarm_node.call_method(ua.NodeId(9111, 0), ua.Variant(ev[1], ua.VariantType.ByteString), ua.LocalizedText("seen by asyncua"))
            # The acknowledgement raised a new event: the old EventId is no longer the
            # condition's, and acknowledging again is refused.
            latest = await c.get_node(ua.NodeId("Demo.Events.Alarm.EventId", 1)).read_value()
            assert latest != ev[1]
            with pytest.raises(ua.uaerrors.BadConditionBranchAlreadyAcked):
                await alarm_node.call_method(ua.NodeId(9111, 0), ua.Variant(latest, ua.VariantType.ByteString), ua.LocalizedText("again"))
            with pytest.raises(ua.uaerrors.BadEventIdUnknown):
                await alarm_node.call_method(ua.NodeId(9113, 0), ua.Variant(b"0123456789abcdef", ua.VariantType.ByteString), ua.LocalizedText("x"))
            assert await c.get_node(ua.NodeId("Demo.Events.Alarm.AckedState.Id", 1)).read_value() is True
            # The acknowledgement is an event too: AckedState true.
            got = await collect_events(r, lambda g: any(f[6] == ALARM and f[2] is True for (_, f) in g))
            acked = [f for (_, f) in got if f[6] == ALARM and f[2] is True][-1]
            await alarm_node.call_method(ua.NodeId(9113, 0), ua.Variant(acked[1], ua.VariantType.ByteString), ua.LocalizedText("confirmed"))
            assert await c.get_node(ua.NodeId("Demo.Events.Alarm.ConfirmedState.Id", 1)).read_value() is True

    run(body())


def test_alarm_shelving(server):
    """The Demo alarm's ShelvingState (Part 9 §5.8.17): asyncua browses to it and calls
    TimedShelve, OneShotShelve and Unshelve on it and on the alarm, sees the shelving in the
    alarm's events (SuppressedOrShelved, ShelvingState/CurrentState/Id) and Variables, and a
    timed shelving end by itself."""
    TIMED_SHELVED, ONE_SHOT_SHELVED, UNSHELVED = ua.NodeId(2932, 0), ua.NodeId(2933, 0), ua.NodeId(2930, 0)

    async def body():
        async with Client(server.url, timeout=10) as c:
            r = Raw(c)
            sub = await r.create_subscription(interval=50)
            f = ua.EventFilter()
            f.SelectClauses = [
                select(type_id=ua.NodeId(2782, 0), attr=ua.AttributeIds.NodeId),
                select("SuppressedOrShelved", type_id=ua.NodeId(2915, 0)),
                select("ShelvingState", "CurrentState", "Id", type_id=ua.NodeId(2915, 0)),
            ]
            res = await event_items(r, sub.SubscriptionId, [(DEMO_EVENTS, f)])
            assert res[0].StatusCode.is_good()
            alarm = c.get_node(ALARM)
            shelving = await alarm.get_child(["0:ShelvingState"])
            assert shelving.nodeid == ua.NodeId("Demo.Events.Alarm.ShelvingState", 1)
            assert (await shelving.read_type_definition()) == ua.NodeId(2929, 0)
            timed = await shelving.get_child(["0:TimedShelve"])
            unshelve = await shelving.get_child(["0:Unshelve"])
            state_id = await shelving.get_child(["0:CurrentState", "0:Id"])
            unshelve_time = await shelving.get_child(["0:UnshelveTime"])
            max_time = await alarm.get_child(["0:MaxTimeShelved"])
            assert await max_time.read_value() == 3_600_000.0
            assert await state_id.read_value() == UNSHELVED

            def shelving_events(got, state):
                return [ev for (_, ev) in got if ev[0] == ALARM and ev[2] == state]

            # Refusals: not shelved, a time out of range.
            with pytest.raises(ua.uaerrors.BadConditionNotShelved):
                await shelving.call_method(unshelve)
            with pytest.raises(ua.uaerrors.BadShelvingTimeOutOfRange):
                await shelving.call_method(timed, ua.Variant(7_200_000.0, ua.VariantType.Double))

            # TimedShelve on the ShelvingState for 1.5 s; it ends by itself.
            await shelving.call_method(timed, ua.Variant(1500.0, ua.VariantType.Double))
            assert await state_id.read_value() == TIMED_SHELVED
            assert 0 < await unshelve_time.read_value() <= 1500.0
            assert await (await alarm.get_child(["0:SuppressedOrShelved"])).read_value() is True
            got = await collect_events(r, lambda g: shelving_events(g, TIMED_SHELVED))
            assert shelving_events(got, TIMED_SHELVED)[-1][1] is True
            got = await collect_events(r, lambda g: shelving_events(g, UNSHELVED), tries=100)
            assert shelving_events(got, UNSHELVED)[-1][1] is False, "the shelving time ran out"
            assert await state_id.read_value() == UNSHELVED
            assert await unshelve_time.read_value() == 0.0

            # The type's methods called on the alarm itself: OneShotShelve, then Unshelve.
            await alarm.call_method(ua.NodeId(2948, 0))
            assert await state_id.read_value() == ONE_SHOT_SHELVED
            with pytest.raises(ua.uaerrors.BadConditionAlreadyShelved):
                await alarm.call_method(ua.NodeId(2948, 0))
            await alarm.call_method(ua.NodeId(2947, 0))
            assert await state_id.read_value() == UNSHELVED
            # Both raised their events.
            await collect_events(r, lambda g: shelving_events(g, ONE_SHOT_SHELVED) and shelving_events(g, UNSHELVED))

    run(body())
