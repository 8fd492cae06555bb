"""ServerDiagnostics' arrays, asyncua against the real uaring binary on two shards:
SessionDiagnosticsArray and SubscriptionDiagnosticsArray show every session and
subscription whatever shard it is on, with counts that count; SessionSecurityDiagnosticsArray
is for a SecurityAdmin only (BadUserAccessDenied for anyone else); the summary's
PublishingIntervalCount counts the intervals in use.

Each shard publishes a snapshot of its sessions and subscriptions off the request path (at
most 250 ms behind, or at its next loop iteration once a Read asked), so the tests poll
until the figures they expect show.

asyncua's generated class for SessionSecurityDiagnosticsDataType takes the `Encoding`
field for its encoding-mask byte, so that structure is decoded by hand here from the
ExtensionObject body.
"""
import asyncio
import time

import pytest
from asyncua import Client, ua
from asyncua.ua import uaerrors
from asyncua.ua.ua_binary import Primitives, nodeid_from_binary
from asyncua.common.utils import Buffer

from conftest import Server, cpus_args
from test_asyncua_security import uaring

SESSIONS = ua.NodeId(3707)
SECURITY = ua.NodeId(3708)
SUBSCRIPTIONS = ua.NodeId(2290)
PUBLISHING_INTERVAL_COUNT = ua.NodeId(2284)
SECURITY_ENCODING = ua.NodeId(870)  # SessionSecurityDiagnosticsDataType_Encoding_DefaultBinary


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture(scope="module")
def diag_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("uaring-diagnostics")
    admin = uaring("hash-password", stdin="admin-pw\n").strip()
    cfg = root / "uaring.toml"
    cfg.write_text(
        '[security]\nanonymous = "read"\n'
        f'[[users]]\nname = "admin"\npassword = "{admin}"\nroles = ["SecurityAdmin"]\n'
    )
    s = Server("--pki", str(root / "pki"), "--config", str(cfg), *cpus_args(),
               "--distribution", "round-robin")
    yield s
    assert s.stop() == 0


async def client(url, name, user=None, password=None):
    c = Client(url, timeout=10)
    c.description = name
    c.application_uri = f"urn:uaring:test:{name}"
    if user is not None:
        c.set_user(user)
        c.set_password(password)
    await c.connect()
    return c


async def poll(read, ok, timeout=5.0):
    """Reads until `ok(value)` holds (the shards' snapshots catch up), returns the value."""
    deadline = time.monotonic() + timeout
    while True:
        v = await read()
        if ok(v) or time.monotonic() > deadline:
            return v
        await asyncio.sleep(0.1)


class Handler:
    def __init__(self):
        self.values = []

    def datachange_notification(self, node, val, data):
        self.values.append(val)


def test_sessions_and_subscriptions_of_every_shard(diag_server):
    async def body():
        a = await client(diag_server.url, "diag-a")
        b = await client(diag_server.url, "diag-b")
        try:
            h = Handler()
            sub = await b.create_subscription(200, h)
            await sub.subscribe_data_change(b.get_node(ua.NodeId(1001, 1)))
            for _ in range(3):
                await a.get_node(ua.NodeId(1001, 1)).read_value()
            deadline = time.monotonic() + 5
            while not h.values and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert h.values, "the subscription delivers"

            def mine(arr):
                return {s.SessionName: s for s in arr if s.SessionName.startswith("diag-")}

            def ready(arr):
                m = mine(arr)
                return (
                    set(m) == {"diag-a Session1", "diag-b Session1"}
                    and m["diag-a Session1"].ReadCount.TotalCount >= 3
                    and m["diag-b Session1"].CurrentMonitoredItemsCount == 1
                )

            node = a.get_node(SESSIONS)
            sessions = mine(await poll(node.read_value, ready))
            assert set(sessions) == {"diag-a Session1", "diag-b Session1"}
            sa, sb = sessions["diag-a Session1"], sessions["diag-b Session1"]
            assert sa.ClientDescription.ApplicationUri == "urn:uaring:test:diag-a"
            assert sa.EndpointUrl == diag_server.url
            assert sa.ReadCount.TotalCount >= 3
            assert sa.ReadCount.ErrorCount == 0
            assert sa.CurrentSubscriptionsCount == 0
            assert sa.ActualSessionTimeout > 0
            assert sa.ClientConnectionTime <= sa.ClientLastContactTime
            assert sb.CurrentSubscriptionsCount == 1
            assert sb.CurrentMonitoredItemsCount == 1
            assert sb.CreateSubscriptionCount.TotalCount == 1
            assert sb.CreateMonitoredItemsCount.TotalCount == 1
            assert sb.PublishCount.TotalCount >= 1
            assert sb.TotalRequestCount.TotalCount >= 3
            assert sa.SessionId != sb.SessionId

            def sub_ready(arr):
                return any(
                    s.SubscriptionId == sub.subscription_id
                    and s.DataChangeNotificationsCount >= 1
                    for s in arr
                )

            subs = await poll(a.get_node(SUBSCRIPTIONS).read_value, sub_ready)
            d = next(s for s in subs if s.SubscriptionId == sub.subscription_id)
            assert d.SessionId == sb.SessionId
            assert d.PublishingInterval == 200.0
            assert d.PublishingEnabled is True
            assert d.MonitoredItemCount == 1
            assert d.DisabledMonitoredItemCount == 0
            assert d.DataChangeNotificationsCount >= 1
            assert d.NotificationsCount >= d.DataChangeNotificationsCount
            assert d.PublishRequestCount >= 1
            assert d.NextSequenceNumber >= 2
            assert d.MaxKeepAliveCount > 0 and d.MaxLifetimeCount >= 3 * d.MaxKeepAliveCount

            count = await a.get_node(PUBLISHING_INTERVAL_COUNT).read_value()
            assert count == 1
        finally:
            await a.disconnect()
            await b.disconnect()

    run(body())


def read_string(buf):
    n = Primitives.Int32.unpack(buf)
    return None if n < 0 else buf.read(n).decode("utf-8")


def decode_security(body):
    """SessionSecurityDiagnosticsDataType from its binary body (Part 6 order)."""
    buf = Buffer(body)
    d = {"SessionId": nodeid_from_binary(buf), "ClientUserIdOfSession": read_string(buf)}
    n = Primitives.Int32.unpack(buf)
    d["ClientUserIdHistory"] = [read_string(buf) for _ in range(max(n, 0))]
    d["AuthenticationMechanism"] = read_string(buf)
    d["Encoding"] = read_string(buf)
    d["TransportProtocol"] = read_string(buf)
    d["SecurityMode"] = Primitives.Int32.unpack(buf)
    d["SecurityPolicyUri"] = read_string(buf)
    n = Primitives.Int32.unpack(buf)
    d["ClientCertificate"] = None if n < 0 else buf.read(n)
    assert len(buf) == 0, "the whole body is the structure"
    return d


def test_session_security_array_is_for_security_admins(diag_server):
    async def body():
        anon = await client(diag_server.url, "diag-anon")
        admin = await client(diag_server.url, "diag-admin", "admin", "admin-pw")
        # Keep asyncua's generated class out of it: the values arrive as raw bodies.
        cls = ua.extension_objects_by_typeid.pop(SECURITY_ENCODING, None)
        try:
            with pytest.raises(uaerrors.BadUserAccessDenied):
                await anon.get_node(SECURITY).read_value()
            # Everyone may read the session array: it names the sessions' ids.
            sessions = await poll(
                anon.get_node(SESSIONS).read_value,
                lambda arr: {"diag-anon Session1", "diag-admin Session1"}
                <= {s.SessionName for s in arr},
            )
            ids = {s.SessionName: s.SessionId for s in sessions}

            def decoded(arr):
                return [decode_security(e.Body) for e in arr]

            async def read():
                return decoded(await admin.get_node(SECURITY).read_value())

            sec = await poll(
                read,
                lambda rows: {ids["diag-anon Session1"], ids["diag-admin Session1"]}
                <= {r["SessionId"] for r in rows},
            )
            by_id = {r["SessionId"]: r for r in sec}
            a = by_id[ids["diag-anon Session1"]]
            assert a["AuthenticationMechanism"] == "Anonymous"
            assert a["ClientUserIdOfSession"] in (None, "")
            assert a["Encoding"] == "UA Binary"
            assert a["TransportProtocol"] == "opc.tcp"
            assert a["SecurityMode"] == ua.MessageSecurityMode.None_
            assert a["SecurityPolicyUri"] == "http://opcfoundation.org/UA/SecurityPolicy#None"
            m = by_id[ids["diag-admin Session1"]]
            assert m["AuthenticationMechanism"] == "UserName"
            assert m["ClientUserIdOfSession"] == "admin"
            assert m["ClientUserIdHistory"] == ["admin"]
        finally:
            if cls is not None:
                ua.extension_objects_by_typeid[SECURITY_ENCODING] = cls
            await anon.disconnect()
            await admin.disconnect()

    run(body())
