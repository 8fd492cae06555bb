"""Companion models loaded at start ([[nodesets]]): the official DI and Machinery NodeSets
(tests/nodesets) browsed and read by asyncua through the real uaring binary."""
import asyncio
import subprocess

import pytest
from asyncua import Client, ua

from conftest import ROOT, Server, uaring_bin

DI = "http://opcfoundation.org/UA/DI/"
MACHINERY = "http://opcfoundation.org/UA/Machinery/"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture(scope="module")
def nodeset_server(tmp_path_factory):
    d = ROOT / "tests" / "nodesets"
    cfg = tmp_path_factory.mktemp("nodeset") / "uaring.toml"
    # Machinery before DI on purpose: the server orders them by RequiredModel.
    cfg.write_text(
        f'[[nodesets]]\nfile = "{d / "Opc.Ua.Machinery.NodeSet2.xml"}"\n'
        f'[[nodesets]]\nfile = "{d / "Opc.Ua.Di.NodeSet2.xml"}"\n'
    )
    s = Server("--config", str(cfg))
    yield s
    assert s.stop() == 0


def test_di_and_machinery_are_browsed_and_read(nodeset_server):
    async def body():
        c = Client(nodeset_server.url, timeout=10)
        await c.connect()
        try:
            ns = await c.get_namespace_array()
            assert DI in ns and MACHINERY in ns
            di, ma = ns.index(DI), ns.index(MACHINERY)
            objects = c.nodes.objects
            names = {(q.NamespaceIndex, q.Name) for q in [await n.read_browse_name() for n in await objects.get_children()]}
            assert (di, "DeviceSet") in names
            assert (ma, "Machines") in names
            # Walk by browse path: Objects / DI:DeviceSet, and the type hierarchy across files.
            device_set = await objects.get_child([f"{di}:DeviceSet"])
            assert device_set.nodeid == ua.NodeId(5001, di)
            assert (await device_set.read_display_name()).Text == "DeviceSet"
            type_def = await device_set.read_type_definition()
            assert type_def == ua.NodeId(ua.ObjectIds.BaseObjectType)
            # Machinery's IMachineTagNameplateType (ns=Machinery;i=1011) is a subtype of DI's
            # ITagNameplateType (ns=DI;i=15048): browse the inverse HasSubtype.
            nameplate = c.get_node(ua.NodeId(1011, ma))
            parents = await nameplate.get_references(refs=ua.ObjectIds.HasSubtype, direction=ua.BrowseDirection.Inverse)
            assert [r.NodeId for r in parents] == [ua.NodeId(15048, di)]
            # A Variable with a value from the file: DI's DeviceHealthEnumeration EnumStrings.
            health = c.get_node(ua.NodeId(6244, di))
            strings = await health.get_child(["0:EnumStrings"])
            assert strings.nodeid == ua.NodeId(6450, di)
            texts = [t.Text for t in await strings.read_value()]
            assert texts == ["NORMAL", "FAILURE", "CHECK_FUNCTION", "OFF_SPEC", "MAINTENANCE_REQUIRED"]
            # Method arguments converted from the XML Argument structures.
            lock = c.get_node(ua.NodeId(6393, di))  # LockingServicesType.InitLock
            args = await lock.get_child(["0:InputArguments"])
            value = await args.read_value()
            assert [a.Name for a in value] == ["Context"]
            assert value[0].DataType == ua.NodeId(ua.ObjectIds.String)
            # Methods of a model are not executable here (the server does not implement them).
            ex = (await lock.read_attribute(ua.AttributeIds.Executable)).Value.Value
            assert ex is False
        finally:
            await c.disconnect()

    run(body())


def test_a_broken_nodeset_stops_the_start_with_file_and_line(tmp_path):
    text = (ROOT / "tests" / "nodesets" / "Opc.Ua.Di.NodeSet2.xml").read_text()
    broken = text.replace(
        '<Reference ReferenceType="Organizes" IsForward="false">i=85</Reference>',
        '<Reference ReferenceType="Organizes" IsForward="false">i=999999</Reference>',
        1,
    )
    line = next(i for i, l in enumerate(broken.splitlines(), 1) if "i=999999" in l)
    f = tmp_path / "broken.xml"
    f.write_text(broken)
    cfg = tmp_path / "uaring.toml"
    cfg.write_text(f'[[nodesets]]\nfile = "{f}"\n')
    p = subprocess.run(
        [uaring_bin(), "serve", "--listen", "127.0.0.1:0", "--config", str(cfg)],
        capture_output=True, text=True, timeout=30,
    )
    assert p.returncode == 1
    assert "listening on" not in p.stdout
    assert f"{f}:{line}: node ns=1;i=5001: reference target i=999999 does not exist" in p.stderr, p.stderr


HISTORIAN_NODESET = """<?xml version="1.0" encoding="utf-8"?>
<UANodeSet xmlns="http://opcfoundation.org/UA/2011/03/UANodeSet.xsd">
  <NamespaceUris><Uri>urn:uaring:test:historian</Uri></NamespaceUris>
  <Models>
    <Model ModelUri="urn:uaring:test:historian" Version="1.0.0" PublicationDate="2026-12-07T00:00:00Z">
      <RequiredModel ModelUri="http://opcfoundation.org/UA/" />
    </Model>
  </Models>
  <Aliases>
    <Alias Alias="Double">i=11</Alias>
    <Alias Alias="Organizes">i=35</Alias>
    <Alias Alias="HasComponent">i=47</Alias>
    <Alias Alias="HasTypeDefinition">i=40</Alias>
  </Aliases>
  <UAObject NodeId="ns=1;i=1" BrowseName="1:Boiler" EventNotifier="13">
    <DisplayName>Boiler</DisplayName>
    <References>
      <Reference ReferenceType="HasTypeDefinition">i=58</Reference>
      <Reference ReferenceType="Organizes" IsForward="false">i=85</Reference>
    </References>
  </UAObject>
  <UAVariable NodeId="ns=1;i=2" BrowseName="1:Temperature" DataType="Double" AccessLevel="15" UserAccessLevel="15" Historizing="true">
    <DisplayName>Temperature</DisplayName>
    <References>
      <Reference ReferenceType="HasTypeDefinition">i=63</Reference>
      <Reference ReferenceType="HasComponent" IsForward="false">ns=1;i=1</Reference>
    </References>
    <Value><Double xmlns="http://opcfoundation.org/UA/2008/02/Types.xsd">20.5</Double></Value>
  </UAVariable>
  <UAVariable NodeId="ns=1;i=3" BrowseName="1:Level" DataType="Double" AccessLevel="7" UserAccessLevel="7">
    <DisplayName>Level</DisplayName>
    <References>
      <Reference ReferenceType="HasTypeDefinition">i=63</Reference>
      <Reference ReferenceType="HasComponent" IsForward="false">ns=1;i=1</Reference>
    </References>
  </UAVariable>
</UANodeSet>
"""


def test_a_nodesets_historizing_variables_and_history_notifiers_keep_history(tmp_path):
    """What is historized can come from a NodeSet (issue 25): a Variable with
    Historizing="true" keeps every value written to it (HistoryRead raw through asyncua),
    one without it shows no history bits; an Object whose EventNotifier has HistoryRead and
    HistoryWrite keeps events inserted with HistoryUpdate and reads them back. The same
    NodeSet on a server without a store (`[history] enabled = false`) advertises none of it."""
    f = tmp_path / "historian.xml"
    f.write_text(HISTORIAN_NODESET)
    for name, history, check in (
        ("uaring.toml", f'dir = "{tmp_path / "history"}"', historized),
        ("off.toml", "enabled = false", not_historized),
    ):
        cfg = tmp_path / name
        cfg.write_text(f'[history]\n{history}\n[[nodesets]]\nfile = "{f}"\n')
        s = Server("--config", str(cfg))
        try:
            run(check(s.url))
        finally:
            assert s.stop() == 0


async def nodes(c):
    idx = await c.get_namespace_index("urn:uaring:test:historian")
    return (
        c.get_node(ua.NodeId(1, idx)),
        c.get_node(ua.NodeId(2, idx)),
        c.get_node(ua.NodeId(3, idx)),
    )


async def historized(url):
    from datetime import datetime, timedelta, timezone

    async with Client(url, timeout=10) as c:
        boiler, temperature, level = await nodes(c)
        historizing = (await temperature.read_attribute(ua.AttributeIds.Historizing)).Value.Value
        assert historizing is True
        al = (await temperature.read_attribute(ua.AttributeIds.AccessLevel)).Value.Value
        assert al & ua.AccessLevel.HistoryRead.mask and al & ua.AccessLevel.HistoryWrite.mask, al
        al = (await level.read_attribute(ua.AttributeIds.AccessLevel)).Value.Value
        assert not al & (ua.AccessLevel.HistoryRead.mask | ua.AccessLevel.HistoryWrite.mask), al
        assert (await level.read_attribute(ua.AttributeIds.Historizing)).Value.Value is False
        notifier = await boiler.read_event_notifier()
        assert ua.EventNotifier.HistoryRead in notifier and ua.EventNotifier.HistoryWrite in notifier

        start = datetime.now(timezone.utc) - timedelta(seconds=1)
        for v in (21.0, 22.5, 23.0):
            await temperature.write_value(ua.DataValue(ua.Variant(v, ua.VariantType.Double)))
            await asyncio.sleep(0.01)

        async def three():
            end = datetime.now(timezone.utc) + timedelta(seconds=1)
            vs = await temperature.read_raw_history(start, end, return_bounds=False)
            got = [v.Value.Value for v in vs]
            return got if got[-3:] == [21.0, 22.5, 23.0] else None

        # The store takes the values through its ingest queue: soon.
        deadline = asyncio.get_running_loop().time() + 20
        got = None
        while got is None and asyncio.get_running_loop().time() < deadline:
            got = await three()
            if got is None:
                await asyncio.sleep(0.1)
        assert got is not None and got[-3:] == [21.0, 22.5, 23.0], got

        # Events of the Boiler, inserted with HistoryUpdate and read back.
        t = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
        select = [
            ua.SimpleAttributeOperand(
                TypeDefinitionId=ua.NodeId(ua.ObjectIds.BaseEventType),
                BrowsePath=[ua.QualifiedName(name, 0)],
                AttributeId=ua.AttributeIds.Value,
            )
            for name in ("EventType", "Time", "Message", "Severity")
        ]
        ev_filter = ua.EventFilter(SelectClauses=select)
        insert = ua.UpdateEventDetails(
            NodeId=boiler.nodeid,
            PerformInsertReplace=ua.PerformUpdateType.Insert,
            Filter=ev_filter,
            EventData=[
                ua.HistoryEventFieldList(
                    EventFields=[
                        ua.Variant(ua.NodeId(ua.ObjectIds.BaseEventType)),
                        ua.Variant(t + timedelta(seconds=i), ua.VariantType.DateTime),
                        ua.Variant(ua.LocalizedText(f"boiler {i}")),
                        ua.Variant(200 + i, ua.VariantType.UInt16),
                    ]
                )
                for i in range(3)
            ],
        )
        (r,) = await c.uaclient.history_update(
            ua.HistoryUpdateParameters(HistoryUpdateDetails=[insert])
        )
        assert [s.value for s in r.OperationResults] == [ua.StatusCodes.GoodEntryInserted] * 3, r
        events = await boiler.read_event_history(t - timedelta(seconds=1), t + timedelta(seconds=10))
        assert [(e.Message.Text, e.Severity) for e in events] == [
            (f"boiler {i}", 200 + i) for i in range(3)
        ], events


async def not_historized(url):
    async with Client(url, timeout=10) as c:
        boiler, temperature, _ = await nodes(c)
        assert (await temperature.read_attribute(ua.AttributeIds.Historizing)).Value.Value is False
        al = (await temperature.read_attribute(ua.AttributeIds.AccessLevel)).Value.Value
        assert not al & (ua.AccessLevel.HistoryRead.mask | ua.AccessLevel.HistoryWrite.mask), al
        notifier = await boiler.read_event_notifier()
        assert ua.EventNotifier.HistoryRead not in notifier, notifier
        assert ua.EventNotifier.HistoryWrite not in notifier, notifier
        assert ua.EventNotifier.SubscribeToEvents in notifier, notifier
