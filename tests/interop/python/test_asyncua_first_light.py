"""asyncua (PyPI) against the real uaring binary, SecurityPolicy None, Anonymous."""
import asyncio
import math
import signal
import time
import datetime
import uuid

import pytest
from asyncua import Client, ua
from asyncua.ua import uaerrors

from conftest import Server, connected, run, session


DEMO_VALUES = {
    "Boolean": (True, ua.VariantType.Boolean),
    "SByte": (-7, ua.VariantType.SByte),
    "Byte": (200, ua.VariantType.Byte),
    "Int16": (-1234, ua.VariantType.Int16),
    "UInt16": (54321, ua.VariantType.UInt16),
    "Int32": (-123456, ua.VariantType.Int32),
    "UInt32": (3_000_000_000, ua.VariantType.UInt32),
    "Int64": (-(2**40), ua.VariantType.Int64),
    "UInt64": (2**63 + 5, ua.VariantType.UInt64),
    "Float": (1.5, ua.VariantType.Float),
    "Double": (3.25, ua.VariantType.Double),
    "String": ("héllo uaring", ua.VariantType.String),
    "DateTime": (datetime.datetime(2026, 11, 29, 12, 0, 0, tzinfo=datetime.timezone.utc), ua.VariantType.DateTime),
    "Guid": (uuid.UUID("72962b91-fa75-4ae6-8d28-b404dc7daf63"), ua.VariantType.Guid),
    "ByteString": (b"\x00\x01\xfe\xff", ua.VariantType.ByteString),
    "NodeId": (ua.NodeId("Demo.Node", 1), ua.VariantType.NodeId),
    "QualifiedName": (ua.QualifiedName("Name", 1), ua.VariantType.QualifiedName),
    "LocalizedText": (ua.LocalizedText("Text", "en-US"), ua.VariantType.LocalizedText),
    "StatusCode": (ua.StatusCode(ua.StatusCodes.BadNodeIdUnknown), ua.VariantType.StatusCode),
}


def same(a, b):
    if isinstance(a, datetime.datetime):
        return a.replace(tzinfo=None) == b.replace(tzinfo=None)
    if isinstance(a, ua.StatusCode):
        return a.value == b.value
    return a == b


def test_server_status_namespace_array_operation_limits(server):
    async def body():
        async with session(server.url) as c:
            status = await c.get_node(ua.ObjectIds.Server_ServerStatus).read_value()
            assert status.State == ua.ServerState.Running
            assert status.BuildInfo.ProductName
            assert status.CurrentTime >= status.StartTime
            state = await c.get_node(ua.ObjectIds.Server_ServerStatus_State).read_value()
            assert state == ua.ServerState.Running
            ns = await c.get_namespace_array()
            assert ns[0] == "http://opcfoundation.org/UA/"
            assert len(ns) >= 2
            max_read = await c.get_node(
                ua.ObjectIds.Server_ServerCapabilities_OperationLimits_MaxNodesPerRead
            ).read_value()
            assert isinstance(max_read, int) and max_read > 0
            max_browse = await c.get_node(
                ua.ObjectIds.Server_ServerCapabilities_OperationLimits_MaxNodesPerBrowse
            ).read_value()
            assert max_browse > 0

    run(body())


def test_browse_objects_with_continuation_points(server):
    async def body():
        async with session(server.url) as c:
            full = await c.nodes.objects.get_children()
            names_full = {(await n.read_browse_name()).Name for n in full}
            assert {"Server", "Demo", "BenchmarkValue0"} <= names_full

            desc = ua.BrowseDescription()
            desc.NodeId = ua.NodeId(ua.ObjectIds.ObjectsFolder)
            desc.BrowseDirection = ua.BrowseDirection.Forward
            desc.ReferenceTypeId = ua.NodeId(ua.ObjectIds.HierarchicalReferences)
            desc.IncludeSubtypes = True
            desc.NodeClassMask = 0
            desc.ResultMask = ua.BrowseResultMask.All
            params = ua.BrowseParameters()
            params.RequestedMaxReferencesPerNode = 7
            params.NodesToBrowse = [desc]
            results = await c.uaclient.browse(params)
            refs = list(results[0].References)
            assert len(refs) <= 7
            cp = results[0].ContinuationPoint
            pages = 1
            while cp:
                nxt = await c.uaclient.browse_next(ua.BrowseNextParameters(ReleaseContinuationPoints=False, ContinuationPoints=[cp]))
                assert nxt[0].StatusCode.is_good()
                assert len(nxt[0].References) <= 7
                refs.extend(nxt[0].References)
                cp = nxt[0].ContinuationPoint
                pages += 1
            assert pages > 1, "expected more than 7 references under Objects"
            assert {r.BrowseName.Name for r in refs} == names_full

    run(body())


def test_translate_objects_server(server):
    async def body():
        async with session(server.url) as c:
            node = await c.nodes.root.get_child(["0:Objects", "0:Server"])
            assert node.nodeid == ua.NodeId(ua.ObjectIds.Server)
            with pytest.raises(uaerrors.BadNoMatch):
                await c.nodes.root.get_child(["0:Objects", "0:NoSuchThing"])

    run(body())


def test_read_write_every_demo_static_type(server):
    async def body():
        async with session(server.url) as c:
            for name, (value, vtype) in DEMO_VALUES.items():
                node = c.get_node(f"ns=1;s=Demo.Static.{name}")
                before = await node.read_data_value()
                assert before.StatusCode.is_good(), name
                await node.write_value(ua.DataValue(ua.Variant(value, vtype)))
                after = await node.read_value()
                assert same(value, after), (name, value, after)
            # Variant: any type is accepted.
            v = c.get_node("ns=1;s=Demo.Static.Variant")
            await v.write_value(ua.DataValue(ua.Variant(42.0, ua.VariantType.Double)))
            assert await v.read_value() == 42.0
            await v.write_value(ua.DataValue(ua.Variant("text", ua.VariantType.String)))
            assert await v.read_value() == "text"
            # Arrays of each.
            for name, (value, vtype) in DEMO_VALUES.items():
                node = c.get_node(f"ns=1;s=Demo.Static.Arrays.{name}")
                arr = [value, value]
                await node.write_value(ua.DataValue(ua.Variant(arr, vtype)))
                got = await node.read_value()
                assert len(got) == 2 and all(same(value, g) for g in got), (name, got)

    run(body())


def test_errors_where_due(server):
    async def body():
        async with session(server.url) as c:
            with pytest.raises(uaerrors.BadTypeMismatch):
                await c.get_node("ns=1;s=Demo.Static.Int32").write_value(
                    ua.DataValue(ua.Variant(1.5, ua.VariantType.Double))
                )
            with pytest.raises(uaerrors.BadTypeMismatch):
                await c.get_node("ns=1;i=1001").write_value(ua.DataValue(ua.Variant("x", ua.VariantType.String)))
            with pytest.raises(uaerrors.BadNotWritable):
                await c.get_node("ns=1;s=Demo.ReadOnly.Int32").write_value(
                    ua.DataValue(ua.Variant(5, ua.VariantType.Int32))
                )
            with pytest.raises(uaerrors.BadNodeIdUnknown):
                await c.get_node("ns=1;s=Does.Not.Exist").read_value()
            with pytest.raises(uaerrors.BadNodeIdUnknown):
                await c.get_node("ns=1;s=Does.Not.Exist").write_value(ua.DataValue(ua.Variant(5, ua.VariantType.Int32)))

    run(body())


def test_benchmark_contract_nodes(server):
    async def body():
        async with session(server.url) as c:
            nodes = [c.get_node(f"ns=1;i={1001 + i}") for i in range(100)]
            names = await c.read_attributes(nodes, ua.AttributeIds.BrowseName)
            assert [dv.Value.Value.Name for dv in names] == [f"BenchmarkValue{i}" for i in range(100)]
            vals = await c.read_values(nodes)
            # Other tests may write; 1050 is only written here.
            assert vals[49] == 49
            await nodes[49].write_value(ua.DataValue(ua.Variant(-5, ua.VariantType.Int32)))
            assert await nodes[49].read_value() == -5

    run(body())


def test_dynamic_counter_increments(server):
    async def body():
        async with session(server.url) as c:
            n = c.get_node("ns=1;s=Demo.Dynamic.Counter")
            a = await n.read_value()
            await asyncio.sleep(0.35)
            b = await n.read_value()
            assert b >= a + 2
            # Sine = sin(2π · t / 10 s) at its SourceTimestamp t (any epoch whose offset
            # from 1601 is a multiple of 10 s: Unix time is one).
            epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
            sine = c.get_node("ns=1;s=Demo.Dynamic.Sine")
            for _ in range(3):
                dv = await sine.read_data_value()
                assert isinstance(dv.Value.Value, float)
                ts = dv.SourceTimestamp if dv.SourceTimestamp.tzinfo else dv.SourceTimestamp.replace(tzinfo=datetime.timezone.utc)
                elapsed = (ts - epoch).total_seconds() % 10.0
                want = math.sin(2 * math.pi * elapsed / 10.0)
                assert abs(dv.Value.Value - want) < 1e-3, (dv.Value.Value, want, elapsed)
                await asyncio.sleep(0.3)

    run(body())


def test_fifty_concurrent_sessions(server):
    async def body():
        clients = [Client(server.url, timeout=20) for _ in range(50)]
        await asyncio.gather(*(c.connect() for c in clients))
        try:
            vals = await asyncio.gather(
                *(c.get_node(f"ns=1;i={1001 + (i % 40)}").read_value() for i, c in enumerate(clients))
            )
            # Each reads its contract value k (nobody in this module writes 1001..1040).
            assert vals == [i % 40 for i in range(50)], vals
        finally:
            await asyncio.gather(*(c.disconnect() for c in clients))

    run(body())


def test_session_closed_is_rejected(server):
    async def body():
        c = await connected(server.url)
        await c.close_session()
        with pytest.raises((uaerrors.BadSessionIdInvalid, uaerrors.BadSessionClosed)):
            await c.get_node("ns=1;i=1001").read_value()
        await c.close_secure_channel()
        c.uaclient._uasocket = None

    run(body())


def test_get_endpoints_and_find_servers(server):
    async def body():
        c = Client(server.url, timeout=10)
        eps = await c.connect_and_get_server_endpoints()
        assert any(e.SecurityPolicyUri.endswith("#None") for e in eps)
        assert all(e.EndpointUrl.startswith("opc.tcp://") for e in eps)
        apps = await c.connect_and_find_servers()
        assert apps and apps[0].ApplicationUri

    run(body())


def test_unserved_namespace0_methods_are_not_executable(server):
    """RequestServerStateChange and SetSubscriptionDurable are not served: Executable and
    UserExecutable read false and a Call is BadNotExecutable; GetMonitoredItems is served."""
    async def body():
        async with session(server.url) as c:
            srv = c.get_node("i=2253")
            for method in ("i=12886", "i=12749"):
                m = c.get_node(method)
                assert (await m.read_attribute(ua.AttributeIds.Executable)).Value.Value is False
                assert (await m.read_attribute(ua.AttributeIds.UserExecutable)).Value.Value is False
            with pytest.raises(ua.UaStatusCodeError) as e:
                await srv.call_method(ua.NodeId(12749, 0), ua.Variant(1, ua.VariantType.UInt32),
                                      ua.Variant(1, ua.VariantType.UInt32))
            assert e.value.code == ua.StatusCodes.BadNotExecutable
            served = c.get_node("i=11492")  # GetMonitoredItems
            assert (await served.read_attribute(ua.AttributeIds.Executable)).Value.Value is True
    run(body())


def test_sigterm_announces_the_shutdown_before_it_begins(tmp_path):
    """[runtime] shutdown_announce_ms: after SIGTERM the session is still served, with
    ServerStatus.State Shutdown, SecondsTillShutdown counting down and a ShutdownReason."""
    cfg = tmp_path / "announce.toml"
    cfg.write_text("[runtime]\nshutdown_announce_ms = 3000\n")
    srv = Server("--config", str(cfg))
    try:
        async def body():
            async with session(srv.url) as c:
                state = c.get_node("i=2259")
                assert await state.read_value() == ua.ServerState.Running
                srv.proc.send_signal(signal.SIGTERM)
                deadline = time.monotonic() + 2
                while await state.read_value() != ua.ServerState.Shutdown:
                    assert time.monotonic() < deadline, "State never went to Shutdown"
                    await asyncio.sleep(0.05)
                left = await c.get_node("i=2992").read_value()
                assert 1 <= left <= 3, left
                reason = await c.get_node("i=2993").read_value()
                assert reason.Text == "The server is shutting down"
                status = await c.get_node("i=2256").read_value()
                assert status.State == ua.ServerState.Shutdown
                assert status.SecondsTillShutdown in (left, left - 1)
        run(body())
        assert srv.proc.wait(timeout=15) == 0, "it stops by itself, cleanly"
    finally:
        srv.stop()
