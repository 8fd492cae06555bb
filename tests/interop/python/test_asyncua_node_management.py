"""NodeManagement (AddNodes, DeleteNodes), asyncua against the real uaring binary: a
`[[users]]` entry with the ConfigureAdmin role adds and deletes nodes while the server runs,
another user is refused with BadUserAccessDenied, a client subscribed to a node that goes
away gets BadNodeIdUnknown, and GeneralModelChangeEvents arrive on the Server object.
"""
import asyncio

import pytest
from asyncua import Client, ua
from asyncua.ua import uaerrors

from conftest import Server
from test_asyncua_security import uaring


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture(scope="module")
def nm_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("uaring-nm")
    admin = uaring("hash-password", stdin="admin-pw\n").strip()
    op = uaring("hash-password", stdin="op-pw\n").strip()
    cfg = root / "uaring.toml"
    cfg.write_text(
        '[security]\nanonymous = "read"\n'
        f'[[users]]\nname = "admin"\npassword = "{admin}"\nroles = ["ConfigureAdmin"]\n'
        f'[[users]]\nname = "op"\npassword = "{op}"\nroles = ["Operator"]\n'
    )
    s = Server("--pki", str(root / "pki"), "--config", str(cfg))
    yield s
    assert s.stop() == 0


async def login(url, user=None, password=None):
    c = Client(url, timeout=10)
    if user is not None:
        c.set_user(user)
        c.set_password(password)
    await c.connect()
    return c


async def wait_for(cond, what):
    for _ in range(200):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Handler:
    def __init__(self):
        self.statuses = []
        self.values = []
        self.events = []

    def datachange_notification(self, node, val, data):
        self.values.append(val)
        self.statuses.append(data.monitored_item.Value.StatusCode.value)

    def status_change_notification(self, status):
        pass

    def event_notification(self, event):
        self.events.append(event)


def test_an_operator_may_not_add_or_delete(nm_server):
    async def body():
        c = await login(nm_server.url, "op", "op-pw")
        try:
            with pytest.raises(uaerrors.BadUserAccessDenied):
                await c.nodes.objects.add_folder(ua.NodeId("Op.Folder", 1), "OpFolder")
            with pytest.raises(uaerrors.BadUserAccessDenied):
                await c.get_node(ua.NodeId(2253)).delete()
        finally:
            await c.disconnect()

    run(body())


def test_nodes_come_and_go_while_a_client_browses_and_subscribes(nm_server):
    async def body():
        admin = await login(nm_server.url, "admin", "admin-pw")
        watcher = await login(nm_server.url)
        try:
            h = Handler()
            sub = await watcher.create_subscription(50, h)
            await sub.subscribe_events(
                watcher.nodes.server, ua.NodeId(ua.ObjectIds.GeneralModelChangeEventType)
            )
            folder = await admin.nodes.objects.add_folder(ua.NodeId("Line1", 1), "Line1")
            var = await folder.add_variable(ua.NodeId("Line1.Speed", 1), "Speed", 1.5)
            # The other client, on whatever shard it landed, sees and reads them.
            w_var = watcher.get_node(ua.NodeId("Line1.Speed", 1))
            await wait_for(lambda: len(h.events) >= 1, "the model change event of AddNodes")
            assert await w_var.read_value() == 1.5
            names = {(await n.read_browse_name()).Name for n in await watcher.nodes.objects.get_children()}
            assert "Line1" in names
            await sub.subscribe_data_change(w_var)
            await wait_for(lambda: 1.5 in h.values, "the initial value")
            # Deleted: the item reports BadNodeIdUnknown, Browse no longer lists it.
            await admin.delete_nodes([folder, var], recursive=False)
            await wait_for(
                lambda: ua.StatusCodes.BadNodeIdUnknown in h.statuses, "BadNodeIdUnknown"
            )
            names = {(await n.read_browse_name()).Name for n in await watcher.nodes.objects.get_children()}
            assert "Line1" not in names
            with pytest.raises(uaerrors.BadNodeIdUnknown):
                await w_var.read_value()
            await wait_for(lambda: len(h.events) >= 2, "the model change event of DeleteNodes")
            changes = [c for ev in h.events for c in ev.Changes]
            added = [c for c in changes if c.Affected == ua.NodeId("Line1", 1) and c.Verb & 1]
            deleted = [c for c in changes if c.Affected == ua.NodeId("Line1.Speed", 1) and c.Verb & 2]
            assert added and deleted, changes
            # Added again with the same id: a new node.
            var2 = await admin.nodes.objects.add_variable(ua.NodeId("Line1.Speed", 1), "Speed", 7.0)
            assert await watcher.get_node(var2.nodeid).read_value() == 7.0
            await admin.delete_nodes([var2])
        finally:
            await watcher.disconnect()
            await admin.disconnect()

    run(body())


@pytest.fixture(scope="module")
def hist_nm_server(tmp_path_factory):
    """A server with a history store and no Variable historized at start."""
    root = tmp_path_factory.mktemp("uaring-nm-history")
    admin = uaring("hash-password", stdin="admin-pw\n").strip()
    cfg = root / "uaring.toml"
    cfg.write_text(
        '[security]\nanonymous = "read"\n'
        f'[[users]]\nname = "admin"\npassword = "{admin}"\nroles = ["ConfigureAdmin", "Operator"]\n'
        f'[history]\nenabled = true\ndir = "{root / "store"}"\nflush_interval_ms = 100\n'
    )
    s = Server("--pki", str(root / "pki"), "--config", str(cfg))
    yield s
    assert s.stop() == 0


def historized_variable_item(node_id, name, value):
    """An AddNodesItem of a Double Variable with Historizing and HistoryRead in its
    AccessLevel (asyncua's add_variable cannot ask for history)."""
    attrs = ua.VariableAttributes()
    attrs.DisplayName = ua.LocalizedText(name)
    attrs.Value = ua.Variant(value, ua.VariantType.Double)
    attrs.DataType = ua.NodeId(ua.ObjectIds.Double)
    attrs.ValueRank = -1
    attrs.AccessLevel = 0x07  # CurrentRead | CurrentWrite | HistoryRead
    attrs.UserAccessLevel = 0x07
    attrs.Historizing = True
    attrs.SpecifiedAttributes = (
        ua.NodeAttributesMask.DisplayName
        | ua.NodeAttributesMask.Value
        | ua.NodeAttributesMask.DataType
        | ua.NodeAttributesMask.ValueRank
        | ua.NodeAttributesMask.AccessLevel
        | ua.NodeAttributesMask.UserAccessLevel
        | ua.NodeAttributesMask.Historizing
    )
    item = ua.AddNodesItem()
    item.ParentNodeId = ua.NodeId(ua.ObjectIds.ObjectsFolder)
    item.ReferenceTypeId = ua.NodeId(ua.ObjectIds.Organizes)
    item.RequestedNewNodeId = node_id
    item.BrowseName = ua.QualifiedName(name, node_id.NamespaceIndex)
    item.NodeClass = ua.NodeClass.Variable
    item.NodeAttributes = attrs
    item.TypeDefinition = ua.NodeId(ua.ObjectIds.BaseDataVariableType)
    return item


def test_a_variable_added_with_historizing_keeps_its_history(hist_nm_server):
    """AddNodes of a Variable with Historizing: the writes that follow are its history, read
    back with read_raw_history (after the value it was added with, its first sample);
    deleted, it is gone with its history (Part 11 §4.7)."""
    import datetime

    async def body():
        admin = await login(hist_nm_server.url, "admin", "admin-pw")
        try:
            start = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5)
            nid = ua.NodeId("Trend.Level", 1)
            [res] = await admin.uaclient.add_nodes([historized_variable_item(nid, "TrendLevel", 0.5)])
            assert res.StatusCode.is_good(), res.StatusCode
            node = admin.get_node(nid)
            assert (await node.read_attribute(ua.AttributeIds.Historizing)).Value.Value is True
            access = (await node.read_attribute(ua.AttributeIds.AccessLevel)).Value.Value
            assert access & 0x04, access
            # Its HistoricalDataConfiguration (Part 11 §5.2.2): the server's sloped one.
            [ref] = await node.get_references(refs=ua.ObjectIds.HasHistoricalConfiguration)
            assert ref.BrowseName.Name == "HA Configuration", ref
            ha = admin.get_node(ref.NodeId)
            assert await (await ha.get_child("0:Stepped")).read_value() is False
            written = [1.25, 2.5, 3.75]
            for v in written:
                await node.write_value(ua.DataValue(ua.Variant(v, ua.VariantType.Double)))
            want = [0.5, *written]
            got = []
            for _ in range(100):
                end = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=5)
                got = [
                    v.Value.Value
                    for v in await node.read_raw_history(start, end, return_bounds=False)
                ]
                if got == want:
                    break
                await asyncio.sleep(0.1)
            assert got == want
            await admin.delete_nodes([node])
            with pytest.raises(uaerrors.BadNodeIdUnknown):
                await node.read_raw_history(start, datetime.datetime.now(datetime.timezone.utc))
            # The HA Configuration stays, without the reference from the deleted Variable.
            back = await ha.get_references(
                refs=ua.ObjectIds.HasHistoricalConfiguration,
                direction=ua.BrowseDirection.Inverse,
            )
            assert nid not in [r.NodeId for r in back], back
        finally:
            await admin.disconnect()

    run(body())
