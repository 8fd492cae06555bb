"""asyncua (PyPI): a session survives reconnects that land on the other shard.

The server runs two shards (`--shards 2`, pinned to CPUs 0-1 where the machine has them)
with round-robin distribution, once on each I/O backend (io_uring, epoll) and once on io_uring
with batched waiting (`batch_wait_us = 50`), so consecutive connections land on alternating
shards. One
subscription watches a variable a second client writes 1, 2, 3, ... 50 times the subscriber
drops its TCP connection (no CloseSession, no CloseSecureChannel), a value is written while
it is away, and it resumes the same session with ActivateSession on a new secure channel.
Every written value must arrive, once, in order, in NotificationMessages whose sequence
numbers have no gap (a message lost with a dropped connection is fetched with Republish).
The server's statistics file proves the connections really moved between the shards.

A second test moves a subscription with TransferSubscriptions to a session of the other
shard and checks that it delivers there.
"""
import asyncio
import json
import os
import tempfile
import time

import pytest
from asyncua import Client, ua
from asyncua.ua.ua_binary import struct_from_binary

from conftest import BATCHED_CONFIG, Server, cpus_args

INT32 = ua.NodeId("Demo.Static.Int32", 1)
CYCLES = 50


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 240))


@pytest.fixture(scope="module", params=["uring", "epoll", "uring-batched"])
def two_shards(request):
    stats = tempfile.NamedTemporaryFile(prefix="uaring-stats-", suffix=".json", delete=False)
    stats.close()
    backend, _, batched = request.param.partition("-")
    s = Server(
        *cpus_args(), "--shards", "2", "--distribution", "round-robin", "--io-backend", backend,
        "--stats-file", stats.name,
        *(["--config", BATCHED_CONFIG] if batched else []),
    )
    s.stats_path = stats.name
    yield s
    code = s.stop()
    os.unlink(stats.name)
    assert code == 0, f"uaring exited with {code} on SIGTERM"


def stats(server):
    """Per-shard counters (the server rewrites the file every second and on SIGUSR1)."""
    import signal

    try:
        before = os.stat(server.stats_path).st_mtime_ns
    except FileNotFoundError:
        before = None
    server.proc.send_signal(signal.SIGUSR1)
    # The file is replaced whole; wait for the one written after this signal.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if os.stat(server.stats_path).st_mtime_ns != before:
                break
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    with open(server.stats_path) as f:
        return json.load(f)


def moved(server):
    doc = stats(server)
    shards = doc["shards"] if isinstance(doc, dict) else doc
    return sum(s.get("moved_in", 0) for s in shards)


async def send(client, request, response_type, timeout=None):
    data = await client.uaclient.session._send_request(request, timeout=timeout)
    return struct_from_binary(response_type, data)


async def create_subscription(client):
    req = ua.CreateSubscriptionRequest()
    req.Parameters = ua.CreateSubscriptionParameters(
        RequestedPublishingInterval=20.0,
        RequestedLifetimeCount=3000,
        RequestedMaxKeepAliveCount=10,
        MaxNotificationsPerPublish=0,
        PublishingEnabled=True,
        Priority=0,
    )
    resp = await send(client, req, ua.CreateSubscriptionResponse)
    resp.ResponseHeader.ServiceResult.check()
    return resp.Parameters.SubscriptionId


async def monitor(client, sub_id, handle):
    p = ua.MonitoringParameters(ClientHandle=handle, SamplingInterval=0.0, QueueSize=100, DiscardOldest=False)
    rv = ua.ReadValueId(NodeId=INT32, AttributeId=ua.AttributeIds.Value)
    req = ua.CreateMonitoredItemsRequest()
    req.Parameters = ua.CreateMonitoredItemsParameters(
        SubscriptionId=sub_id,
        TimestampsToReturn=ua.TimestampsToReturn.Both,
        ItemsToCreate=[ua.MonitoredItemCreateRequest(ItemToMonitor=rv, MonitoringMode=ua.MonitoringMode.Reporting, RequestedParameters=p)],
    )
    resp = await send(client, req, ua.CreateMonitoredItemsResponse)
    resp.ResponseHeader.ServiceResult.check()
    resp.Results[0].StatusCode.check()


async def publish(client, acks, timeout=10):
    req = ua.PublishRequest()
    req.Parameters.SubscriptionAcknowledgements = list(acks)
    data = await asyncio.wait_for(client.uaclient.session._send_request(req, timeout=0), timeout)
    resp = struct_from_binary(ua.PublishResponse, data)
    resp.ResponseHeader.ServiceResult.check()
    return resp.Parameters


async def republish(client, sub_id, seq):
    req = ua.RepublishRequest()
    req.Parameters = ua.RepublishParameters(SubscriptionId=sub_id, RetransmitSequenceNumber=seq)
    resp = await send(client, req, ua.RepublishResponse)
    resp.ResponseHeader.ServiceResult.check()
    return resp.NotificationMessage


def values_of(message, handle):
    out = []
    for n in message.NotificationData:
        if isinstance(n, ua.DataChangeNotification):
            out.extend(m.Value.Value.Value for m in n.MonitoredItems if m.ClientHandle == handle)
    return out


async def reconnect(client):
    """Drop the TCP connection and resume the same session on a new secure channel."""
    client.disconnect_socket()
    await client.connect_socket()
    await client.send_hello()
    await client.open_secure_channel()
    client.uaclient.session.rebind_authentication_token()
    await client.activate_session()


class Subscriber:
    """Collects one item's values in order, following the sequence numbers."""

    def __init__(self, client, sub_id, handle):
        self.c, self.sub, self.handle = client, sub_id, handle
        self.values, self.acks, self.last_seq, self.republished = [], [], None, 0

    async def take(self, message):
        seq = message.SequenceNumber
        if not message.NotificationData:
            return  # a keep-alive carries the next sequence number; nothing to acknowledge
        if self.last_seq is not None:
            assert seq > self.last_seq, f"sequence number went back: {self.last_seq} -> {seq}"
            for missing in range(self.last_seq + 1, seq):
                # Sent into a connection that was dropped: still in the retransmission queue.
                m = await republish(self.c, self.sub, missing)
                self.republished += 1
                assert m.SequenceNumber == missing
                self.values.extend(values_of(m, self.handle))
                self.acks.append(ua.SubscriptionAcknowledgement(SubscriptionId=self.sub, SequenceNumber=missing))
        self.last_seq = seq
        self.values.extend(values_of(message, self.handle))
        self.acks.append(ua.SubscriptionAcknowledgement(SubscriptionId=self.sub, SequenceNumber=seq))

    async def until(self, value):
        deadline = time.monotonic() + 15
        while value not in self.values:
            assert time.monotonic() < deadline, f"value {value} not delivered; have {self.values[-5:]}"
            p = await publish(self.c, self.acks)
            self.acks = []
            assert p.SubscriptionId == self.sub
            await self.take(p.NotificationMessage)


def test_fifty_reconnects_across_shards_keep_the_subscription(two_shards):
    async def main():
        url = two_shards.url
        writer = Client(url)
        await writer.connect()
        sub_client = Client(url)
        await sub_client.connect()
        try:
            node = writer.get_node(INT32)
            await node.write_value(ua.Variant(0, ua.VariantType.Int32))
            sub_id = await create_subscription(sub_client)
            await monitor(sub_client, sub_id, 7)
            s = Subscriber(sub_client, sub_id, 7)
            await s.until(0)
            v = 0
            moved_before = moved(two_shards)
            for _ in range(CYCLES):
                v += 1
                await node.write_value(ua.Variant(v, ua.VariantType.Int32))
                # A Publish is outstanding when the connection drops: its answer may be lost.
                pending = asyncio.ensure_future(publish(sub_client, s.acks))
                await asyncio.sleep(0.05)
                s.acks = []
                sub_client.disconnect_socket()
                pending.cancel()
                try:
                    await pending
                except BaseException:
                    pass
                v += 1
                await node.write_value(ua.Variant(v, ua.VariantType.Int32))
                await reconnect(sub_client)
                await s.until(v)
            assert s.values == list(range(0, v + 1)), f"lost, duplicated or reordered: {s.values}"
            moves = moved(two_shards) - moved_before
            # Round robin alternates the shards; the writer's connection stays put.
            assert moves >= CYCLES // 2 - 1, f"only {moves} of {CYCLES} reconnects moved to the owning shard"
            print(f"{CYCLES} reconnects, {moves} moved to the other shard, {s.republished} Republish")
        finally:
            await sub_client.disconnect()
            await writer.disconnect()

    run(main())


def channel_shard(client):
    return client.uaclient.protocol._connection.security_token.ChannelId >> 24


async def transfer(client, ids, initial=True):
    req = ua.TransferSubscriptionsRequest()
    req.Parameters = ua.TransferSubscriptionsParameters(SubscriptionIds=list(ids), SendInitialValues=initial)
    resp = await send(client, req, ua.TransferSubscriptionsResponse)
    resp.ResponseHeader.ServiceResult.check()
    return resp.Parameters.Results


def test_transfer_subscriptions_to_a_session_of_the_other_shard(two_shards):
    async def main():
        url = two_shards.url
        writer = Client(url)
        await writer.connect()
        old = Client(url)
        await old.connect()
        new = None
        try:
            node = writer.get_node(INT32)
            await node.write_value(ua.Variant(1000, ua.VariantType.Int32))
            sub_id = await create_subscription(old)
            await monitor(old, sub_id, 9)
            first = await publish(old, [])
            assert values_of(first.NotificationMessage, 9) == [1000]
            unacked = first.NotificationMessage.SequenceNumber
            # A session whose connection landed on the other shard.
            for _ in range(4):
                new = Client(url)
                await new.connect()
                if channel_shard(new) != sub_id >> 24:
                    break
                await new.disconnect()
                new = None
            assert new is not None, "no connection landed on the other shard"
            results = await transfer(new, [sub_id])
            results[0].StatusCode.check()
            assert list(results[0].AvailableSequenceNumbers) == [unacked], "the unacknowledged message moved along"
            # The old session is told that its subscription left.
            p = await publish(old, [])
            assert p.SubscriptionId == sub_id
            status = [n for n in p.NotificationMessage.NotificationData if isinstance(n, ua.StatusChangeNotification)]
            assert status and status[0].Status.value == ua.StatusCodes.GoodSubscriptionTransferred
            # The new session gets the initial value, the kept message, then every new value.
            s = Subscriber(new, sub_id, 9)
            s.last_seq = unacked - 1
            m = await republish(new, sub_id, unacked)
            await s.take(m)
            # The StatusChangeNotification to the old session used the next sequence number.
            s.last_seq = p.NotificationMessage.SequenceNumber
            await s.until(1000)
            for v in range(1001, 1021):
                await node.write_value(ua.Variant(v, ua.VariantType.Int32))
                await s.until(v)
            assert s.values[0] == 1000 and s.values[-20:] == list(range(1001, 1021)), s.values
        finally:
            for c in (new, old, writer):
                if c is not None:
                    await c.disconnect()

    run(main())
