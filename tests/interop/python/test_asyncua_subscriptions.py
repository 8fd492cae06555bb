"""asyncua (PyPI) subscriptions against the real uaring binary.

Most tests drive the Subscription and MonitoredItem services with raw requests and send each
Publish by hand (asyncua's own publish loop is not started), so every NotificationMessage,
keep-alive and status change is seen exactly as the server sent it. One test uses asyncua's
high-level Subscription API the way applications do, and one runs over each security policy
in SignAndEncrypt.
"""
import asyncio
import tempfile
import pathlib

import pytest
from asyncua import Client, ua
from asyncua.crypto import security_policies as sp
from asyncua.ua.ua_binary import struct_from_binary

from conftest import Server
from test_asyncua_security import Identity

OVERFLOW = 0x0480  # InfoType DataValue + Overflow bit
DOUBLE = ua.NodeId("Demo.Static.Double", 1)
INT32 = ua.NodeId("Demo.Static.Int32", 1)
STRING = ua.NodeId("Demo.Static.String", 1)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


class Raw:
    """A connected asyncua client that sends subscription requests itself."""

    def __init__(self, client):
        self.c = client
        self.s = client.uaclient.session

    async def send(self, request, response_type):
        data = await self.s._send_request(request)
        resp = struct_from_binary(response_type, data)
        return resp

    async def create_subscription(self, interval=50.0, keep_alive=10, lifetime=1000, max_notifications=0, enabled=True):
        req = ua.CreateSubscriptionRequest()
        req.Parameters = ua.CreateSubscriptionParameters(
            RequestedPublishingInterval=interval,
            RequestedLifetimeCount=lifetime,
            RequestedMaxKeepAliveCount=keep_alive,
            MaxNotificationsPerPublish=max_notifications,
            PublishingEnabled=enabled,
            Priority=0,
        )
        resp = await self.send(req, ua.CreateSubscriptionResponse)
        resp.ResponseHeader.ServiceResult.check()
        return resp.Parameters

    async def create_items(self, sub_id, specs, ttr=ua.TimestampsToReturn.Both):
        """specs: dicts with node, handle, and optional queue, discard_oldest, sampling, filter, mode, attr."""
        items = []
        for s in specs:
            p = ua.MonitoringParameters(
                ClientHandle=s["handle"],
                SamplingInterval=s.get("sampling", 1.0),
                Filter=s.get("filter"),
                QueueSize=s.get("queue", 1),
                DiscardOldest=s.get("discard_oldest", True),
            )
            rv = ua.ReadValueId(NodeId=s["node"], AttributeId=s.get("attr", ua.AttributeIds.Value))
            items.append(ua.MonitoredItemCreateRequest(ItemToMonitor=rv, MonitoringMode=s.get("mode", ua.MonitoringMode.Reporting), RequestedParameters=p))
        req = ua.CreateMonitoredItemsRequest()
        req.Parameters = ua.CreateMonitoredItemsParameters(SubscriptionId=sub_id, TimestampsToReturn=ttr, ItemsToCreate=items)
        resp = await self.send(req, ua.CreateMonitoredItemsResponse)
        resp.ResponseHeader.ServiceResult.check()
        return resp.Results

    async def publish(self, acks=(), timeout=10):
        req = ua.PublishRequest()
        req.Parameters.SubscriptionAcknowledgements = list(acks)
        data = await asyncio.wait_for(self.s._send_request(req, timeout=0), timeout)
        return struct_from_binary(ua.PublishResponse, data)

    async def publish_data(self, acks=(), tries=20):
        """Publishes until a message with notifications arrives (skipping keep-alives)."""
        for _ in range(tries):
            r = await self.publish(acks)
            acks = ()
            if r.Parameters.NotificationMessage.NotificationData:
                return r
        raise AssertionError("no data change arrived")

    async def write(self, node, value, vtype):
        await self.c.get_node(node).write_value(ua.DataValue(ua.Variant(value, vtype)))


def values(resp):
    out = []
    for n in resp.Parameters.NotificationMessage.NotificationData:
        if isinstance(n, ua.DataChangeNotification):
            out.extend((m.ClientHandle, m.Value.Value.Value, m.Value.StatusCode.value) for m in n.MonitoredItems)
    return out


async def raw_client(url):
    c = Client(url, timeout=10)
    await c.connect()
    return c, Raw(c)


def test_high_level_api_delivers_every_write_in_order(server):
    class Handler:
        def __init__(self):
            self.values = []

        def datachange_notification(self, node, val, data):
            self.values.append(val)

    async def body():
        async with Client(server.url, timeout=10) as c:
            h = Handler()
            sub = await c.create_subscription(50, h)
            node = c.get_node(INT32)
            await sub.subscribe_data_change(node, queuesize=20, sampling_interval=1)
            for i in range(1, 21):
                await node.write_value(ua.DataValue(ua.Variant(1000 + i, ua.VariantType.Int32)))
                await asyncio.sleep(0.02)
            for _ in range(50):
                if h.values and h.values[-1] == 1020:
                    break
                await asyncio.sleep(0.05)
            await sub.delete()
        # The initial value, then every write, in order.
        writes = [v for v in h.values if v > 1000]
        assert writes == list(range(1001, 1021)), h.values

    run(body())


@pytest.mark.parametrize("queue", [1, 20])
def test_queue_of_one_keeps_latest_and_queue_of_twenty_keeps_all(server, queue):
    async def body():
        c, r = await raw_client(server.url)
        try:
            node = INT32
            sub = await r.create_subscription(interval=500)
            res = await r.create_items(sub.SubscriptionId, [{"node": node, "handle": 7, "queue": queue, "sampling": 1.0}])
            assert res[0].StatusCode.is_good()
            assert res[0].RevisedQueueSize == queue
            first = await r.publish_data()
            seq = first.Parameters.NotificationMessage.SequenceNumber
            # Ten writes inside one publishing interval, each sampled (1 ms sampling).
            for i in range(10):
                await r.write(node, 2000 + i, ua.VariantType.Int32)
                await asyncio.sleep(0.01)
            resp = await r.publish_data([ua.SubscriptionAcknowledgement(SubscriptionId=sub.SubscriptionId, SequenceNumber=seq)])
            got = [v for (_, v, _) in values(resp)]
            if queue == 1:
                assert got == [2009]
            else:
                assert got == list(range(2000, 2010))
            assert resp.Parameters.Results == [ua.StatusCode(ua.StatusCodes.Good)]
        finally:
            await c.disconnect()

    run(body())


@pytest.mark.parametrize("discard_oldest", [True, False])
def test_discard_policy_and_overflow_bit(server, discard_oldest):
    async def body():
        c, r = await raw_client(server.url)
        try:
            sub = await r.create_subscription(interval=1000)
            await r.create_items(sub.SubscriptionId, [{"node": INT32, "handle": 1, "queue": 3, "discard_oldest": discard_oldest, "sampling": 1.0}])
            first = await r.publish_data()  # the initial value
            for v in (11, 12, 13, 14, 15, 16):
                await r.write(INT32, v, ua.VariantType.Int32)
                await asyncio.sleep(0.01)
            resp = await r.publish_data()
            got = values(resp)
            vals = [v for (_, v, _) in got]
            statuses = [s for (_, _, s) in got]
            if discard_oldest:
                assert vals == [14, 15, 16]
                assert statuses[0] & 0xFFFF == OVERFLOW and statuses[1] == 0 and statuses[2] == 0
            else:
                assert vals == [11, 12, 16]
                assert statuses[2] & 0xFFFF == OVERFLOW and statuses[0] == 0 and statuses[1] == 0
            assert first is not None
        finally:
            await c.disconnect()

    run(body())


def test_absolute_deadband_and_filter_errors(server):
    async def body():
        c, r = await raw_client(server.url)
        try:
            await r.write(DOUBLE, 10.0, ua.VariantType.Double)
            sub = await r.create_subscription(interval=100)
            absolute = ua.DataChangeFilter(Trigger=ua.DataChangeTrigger.StatusValue, DeadbandType=1, DeadbandValue=1.0)
            percent = ua.DataChangeFilter(Trigger=ua.DataChangeTrigger.StatusValue, DeadbandType=2, DeadbandValue=10.0)
            res = await r.create_items(
                sub.SubscriptionId,
                [
                    {"node": DOUBLE, "handle": 1, "queue": 10, "filter": absolute, "sampling": 1.0},
                    {"node": STRING, "handle": 2, "filter": absolute},
                    {"node": DOUBLE, "handle": 3, "filter": percent},
                    {"node": DOUBLE, "handle": 4, "filter": absolute, "attr": ua.AttributeIds.DisplayName},
                ],
            )
            assert res[0].StatusCode.is_good()
            assert res[1].StatusCode.value == ua.StatusCodes.BadFilterNotAllowed
            assert res[2].StatusCode.value == ua.StatusCodes.BadDeadbandFilterInvalid  # no EURange
            assert res[3].StatusCode.value == ua.StatusCodes.BadFilterNotAllowed
            assert [v for (_, v, _) in values(await r.publish_data())] == [10.0]
            for v in (10.5, 10.9, 11.5, 11.0, 12.6):
                await r.write(DOUBLE, v, ua.VariantType.Double)
                await asyncio.sleep(0.02)
            got = []
            while len(got) < 2:
                got += [v for (_, v, _) in values(await r.publish_data())]
            assert got == [11.5, 12.6]
        finally:
            await c.disconnect()

    run(body())


def test_monitoring_modes_and_triggering(server):
    async def body():
        c, r = await raw_client(server.url)
        try:
            trig = ua.NodeId("Demo.Static.Int16", 1)
            linked = ua.NodeId("Demo.Static.UInt16", 1)
            sub = await r.create_subscription(interval=50, keep_alive=2)
            res = await r.create_items(
                sub.SubscriptionId,
                [
                    {"node": trig, "handle": 1, "queue": 5},
                    {"node": linked, "handle": 2, "queue": 5, "mode": ua.MonitoringMode.Sampling},
                    {"node": INT32, "handle": 3, "mode": ua.MonitoringMode.Disabled},
                ],
            )
            trig_id, linked_id, disabled_id = (x.MonitoredItemId for x in res)
            # Only the reporting item's initial value is reported.
            first = values(await r.publish_data())
            assert [h for (h, _, _) in first] == [1]
            req = ua.SetTriggeringRequest()
            req.Parameters = ua.SetTriggeringParameters(SubscriptionId=sub.SubscriptionId, TriggeringItemId=trig_id, LinksToAdd=[linked_id, 999999])
            st = await r.send(req, ua.SetTriggeringResponse)
            assert st.Parameters.AddResults[0].is_good()
            assert st.Parameters.AddResults[1].value == ua.StatusCodes.BadMonitoredItemIdInvalid
            # A change of the sampling item alone is not reported...
            await r.write(linked, 77, ua.VariantType.UInt16)
            await asyncio.sleep(0.1)
            r1 = await r.publish()
            assert values(r1) == [], values(r1)
            # ...until the triggering item reports: then its queue goes out too.
            await r.write(trig, 5, ua.VariantType.Int16)
            got = values(await r.publish_data())
            assert {h for (h, _, _) in got} == {1, 2}, got
            assert (2, 77, 0) in got
            # Disabled → Reporting: the item reports its current value.
            req = ua.SetMonitoringModeRequest()
            req.Parameters = ua.SetMonitoringModeParameters(SubscriptionId=sub.SubscriptionId, MonitoringMode=ua.MonitoringMode.Reporting, MonitoredItemIds=[disabled_id, 424242])
            sm = await r.send(req, ua.SetMonitoringModeResponse)
            assert sm.Parameters.Results[0].is_good()
            assert sm.Parameters.Results[1].value == ua.StatusCodes.BadMonitoredItemIdInvalid
            got = values(await r.publish_data())
            assert [h for (h, _, _) in got] == [3]
        finally:
            await c.disconnect()

    run(body())


def test_republish_after_a_dropped_response_and_acknowledge(server):
    async def body():
        c, r = await raw_client(server.url)
        try:
            sub = await r.create_subscription(interval=50)
            await r.create_items(sub.SubscriptionId, [{"node": INT32, "handle": 9}])
            resp = await r.publish_data()
            msg = resp.Parameters.NotificationMessage
            seq = msg.SequenceNumber
            assert seq in resp.Parameters.AvailableSequenceNumbers
            # The client "lost" that response: Republish gives the same message.
            rq = ua.RepublishRequest()
            rq.Parameters = ua.RepublishParameters(SubscriptionId=sub.SubscriptionId, RetransmitSequenceNumber=seq)
            rp = await r.send(rq, ua.RepublishResponse)
            rp.ResponseHeader.ServiceResult.check()
            assert rp.NotificationMessage.SequenceNumber == seq
            assert values(ua.PublishResponse(Parameters=ua.PublishResult(NotificationMessage=rp.NotificationMessage))) == values(resp)
            # Acknowledged: gone; a second acknowledgement is BadSequenceNumberUnknown.
            await r.write(INT32, 31337, ua.VariantType.Int32)
            ack = ua.SubscriptionAcknowledgement(SubscriptionId=sub.SubscriptionId, SequenceNumber=seq)
            r2 = await r.publish_data([ack])
            assert r2.Parameters.Results[0].is_good()
            with pytest.raises(ua.uaerrors.BadMessageNotAvailable):
                await r.send(rq, ua.RepublishResponse)
            r3 = await r.publish([ack])
            assert r3.Parameters.Results[0].value == ua.StatusCodes.BadSequenceNumberUnknown
            bad = ua.SubscriptionAcknowledgement(SubscriptionId=123456, SequenceNumber=1)
            await r.write(INT32, 31338, ua.VariantType.Int32)
            r4 = await r.publish([bad])
            assert r4.Parameters.Results[0].value == ua.StatusCodes.BadSubscriptionIdInvalid
        finally:
            await c.disconnect()

    run(body())


def test_keep_alive_and_lifetime_expiry(server):
    async def body():
        c, r = await raw_client(server.url)
        try:
            # 50 ms publishing, keep-alive every 2 intervals, lifetime 6 intervals (>= 3 x 2).
            # Timed from before the subscription exists: the second keep-alive goes out at the
            # earliest two intervals after the first one's publishing cycle, which is not before
            # the creation, whatever the load (a bound of the protocol, not of speed; timed from
            # the first Publish instead, a client slow to send it shortened the gap).
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            sub = await r.create_subscription(interval=50, keep_alive=2, lifetime=6)
            assert sub.RevisedMaxKeepAliveCount == 2 and sub.RevisedLifetimeCount == 6
            k1 = await r.publish()
            k2 = await r.publish()
            elapsed = loop.time() - t0
            for k in (k1, k2):
                assert k.Parameters.SubscriptionId == sub.SubscriptionId
                assert k.Parameters.NotificationMessage.NotificationData == []
            # A keep-alive carries the next sequence number without consuming it.
            assert k1.Parameters.NotificationMessage.SequenceNumber == k2.Parameters.NotificationMessage.SequenceNumber == 1
            assert elapsed > 0.09, elapsed  # the second keep-alive waited for its count
            # No Publish for much longer than the lifetime: the subscription expires.
            await asyncio.sleep(1.0)
            expired = await r.publish()
            data = expired.Parameters.NotificationMessage.NotificationData
            assert len(data) == 1 and isinstance(data[0], ua.StatusChangeNotification)
            assert data[0].Status.value == ua.StatusCodes.BadTimeout
            with pytest.raises(ua.uaerrors.BadNoSubscription):
                await r.publish()
        finally:
            await c.disconnect()

    run(body())


def test_service_errors(server):
    async def body():
        c, r = await raw_client(server.url)
        try:
            with pytest.raises(ua.uaerrors.BadNoSubscription):
                await r.publish()
            sub = await r.create_subscription(interval=10_000)
            res = await r.create_items(sub.SubscriptionId, [{"node": ua.NodeId("No.Such.Node", 1), "handle": 1}, {"node": INT32, "handle": 2, "attr": 99}])
            assert res[0].StatusCode.value == ua.StatusCodes.BadNodeIdUnknown
            assert res[1].StatusCode.value == ua.StatusCodes.BadAttributeIdInvalid
            req = ua.CreateMonitoredItemsRequest()
            req.Parameters = ua.CreateMonitoredItemsParameters(SubscriptionId=777, TimestampsToReturn=ua.TimestampsToReturn.Both, ItemsToCreate=[])
            with pytest.raises(ua.uaerrors.BadNothingToDo):
                await r.send(req, ua.CreateMonitoredItemsResponse)
            req.Parameters.ItemsToCreate = [ua.MonitoredItemCreateRequest(ItemToMonitor=ua.ReadValueId(NodeId=INT32, AttributeId=13))]
            with pytest.raises(ua.uaerrors.BadSubscriptionIdInvalid):
                await r.send(req, ua.CreateMonitoredItemsResponse)
            ok = await r.create_items(sub.SubscriptionId, [{"node": INT32, "handle": 3}])
            assert ok[0].StatusCode.is_good()
            # More Publish requests than the session may queue: the extra one is refused.
            pending = [asyncio.ensure_future(r.publish(timeout=30)) for _ in range(65)]
            done, _ = await asyncio.wait(pending, timeout=5, return_when=asyncio.FIRST_EXCEPTION)
            errors = [t.exception() for t in done if t.exception() is not None]
            assert any(isinstance(e, ua.uaerrors.BadTooManyPublishRequests) for e in errors), errors
            dreq = ua.DeleteSubscriptionsRequest()
            dreq.Parameters.SubscriptionIds = [sub.SubscriptionId, sub.SubscriptionId]
            d = await r.send(dreq, ua.DeleteSubscriptionsResponse)
            assert d.Results[0].is_good() and d.Results[1].value == ua.StatusCodes.BadSubscriptionIdInvalid
            # The queued Publish requests are answered once no subscription is left.
            results = await asyncio.gather(*pending, return_exceptions=True)
            assert all(isinstance(x, Exception) or x.Parameters is not None for x in results)
        finally:
            await c.disconnect()

    run(body())


def test_transfer_between_sessions_of_the_same_user():
    # One shard: both sessions live on it (cross-shard transfer is a later issue).
    server = Server("--cpus", "0")

    async def body():
        c1, r1 = await raw_client(server.url)
        c2, r2 = await raw_client(server.url)
        try:
            sub = await r1.create_subscription(interval=50)
            await r1.create_items(sub.SubscriptionId, [{"node": INT32, "handle": 5}])
            await r1.publish_data()
            req = ua.TransferSubscriptionsRequest()
            req.Parameters = ua.TransferSubscriptionsParameters(SubscriptionIds=[sub.SubscriptionId], SendInitialValues=True)
            tr = await r2.send(req, ua.TransferSubscriptionsResponse)
            assert tr.Parameters.Results[0].StatusCode.is_good()
            # The old session learns it lost the subscription.
            old = await r1.publish()
            data = old.Parameters.NotificationMessage.NotificationData
            assert isinstance(data[0], ua.StatusChangeNotification)
            assert data[0].Status.value == ua.StatusCodes.GoodSubscriptionTransferred
            # The new one gets the initial values and later changes.
            got = values(await r2.publish_data())
            assert got and got[0][0] == 5
            await r2.write(INT32, 4242, ua.VariantType.Int32)
            got = []
            while not any(v == 4242 for (_, v, _) in got):
                got += values(await r2.publish_data())
        finally:
            await c1.disconnect()
            await c2.disconnect()

    try:
        run(body())
    finally:
        assert server.stop() == 0


def test_counters_mode_samples_on_schedule():
    server = Server("--counters", "50")
    try:
        async def body():
            c, r = await raw_client(server.url)
            try:
                sub = await r.create_subscription(interval=100)
                res = await r.create_items(sub.SubscriptionId, [{"node": ua.NodeId(i, 1), "handle": i, "sampling": 10.0} for i in range(1, 51)])
                assert all(x.StatusCode.is_good() and x.RevisedSamplingInterval == 10.0 for x in res)
                seen = {}
                loop = asyncio.get_running_loop()
                end = loop.time() + 1.5
                acks = []
                while loop.time() < end:
                    resp = await r.publish(acks)
                    acks = [ua.SubscriptionAcknowledgement(SubscriptionId=sub.SubscriptionId, SequenceNumber=resp.Parameters.NotificationMessage.SequenceNumber)] if resp.Parameters.NotificationMessage.NotificationData else []
                    for n in resp.Parameters.NotificationMessage.NotificationData:
                        for m in n.MonitoredItems:
                            seen.setdefault(m.ClientHandle, []).append((m.Value.Value.Value, m.Value.SourceTimestamp))
                assert sorted(seen) == list(range(1, 51))
                for handle, vals in seen.items():
                    counts = [v for (v, _) in vals]
                    assert counts == sorted(counts) and len(set(counts)) == len(counts), handle
                    (v0, t0), (v1, t1) = vals[0], vals[-1]
                    # Samples taken over the window, at 10 ms: the value counts them.
                    expected = (t1 - t0).total_seconds() / 0.010
                    assert expected > 50
                    assert (v1 - v0) >= 0.9 * expected, (handle, v1 - v0, expected)
            finally:
                await c.disconnect()

        run(body())
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("policy", [sp.SecurityPolicyBasic256Sha256, sp.SecurityPolicyAes128Sha256RsaOaep, sp.SecurityPolicyAes256Sha256RsaPss], ids=lambda p: p.URI.rsplit("#", 1)[1])
def test_subscription_over_sign_and_encrypt(policy, tmp_path):
    ident = Identity(tmp_path, "sub-client", "urn:uaring:test:subclient")
    server = Server("--contract", "--pki", str(tmp_path / "pki"))
    try:
        async def body():
            c = Client(server.url, timeout=10)
            c.application_uri = ident.uri
            await c.set_security(policy, certificate=str(ident.cert), private_key=str(ident.key), mode=ua.MessageSecurityMode.SignAndEncrypt)
            await c.connect()
            try:
                r = Raw(c)
                node = ua.NodeId(1001, 1)
                sub = await r.create_subscription(interval=50)
                await r.create_items(sub.SubscriptionId, [{"node": node, "handle": 1, "queue": 10}])
                await r.publish_data()
                for v in (501, 502, 503):
                    await r.write(node, v, ua.VariantType.Int32)
                    await asyncio.sleep(0.02)
                got = []
                while len(got) < 3:
                    got += [v for (_, v, _) in values(await r.publish_data())]
                assert got == [501, 502, 503]
            finally:
                await c.disconnect()

        run(body())
    finally:
        assert server.stop() == 0
