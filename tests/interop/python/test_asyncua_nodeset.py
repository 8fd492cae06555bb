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
