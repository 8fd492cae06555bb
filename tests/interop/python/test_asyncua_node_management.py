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
