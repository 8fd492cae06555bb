"""Roles and RolePermissions, asyncua against the real uaring binary: `[[users]] roles`
grant well-known roles, a NodeSet's <RolePermissions> (tests/interop/nodesets/
roles.NodeSet2.xml) say what each role may do on a node, and the RoleSet lists the mapping.

Users log in with UserName tokens on the None endpoint (the password RSA-encrypted with the
server certificate, as the server's default `user_token_policy_on_none` asks).
"""
import asyncio

import pytest
from asyncua import Client, ua
from asyncua.ua import uaerrors

from conftest import ROOT, Server
from test_asyncua_security import uaring

NS = "urn:uaring:test:roles"
OBSERVER = ua.NodeId(15668)
ENGINEER = ua.NodeId(16036)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture(scope="module")
def roles_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("uaring-roles")
    viewer = uaring("hash-password", stdin="viewer-pw\n").strip()
    engineer = uaring("hash-password", stdin="engineer-pw\n").strip()
    cfg = root / "uaring.toml"
    cfg.write_text(
        '[security]\nanonymous = "read"\n'
        f'[[users]]\nname = "viewer"\npassword = "{viewer}"\nroles = ["Observer"]\n'
        f'[[users]]\nname = "engineer"\npassword = "{engineer}"\nroles = ["Engineer"]\n'
        f'[[nodesets]]\nfile = "{ROOT / "tests/interop/nodesets/roles.NodeSet2.xml"}"\n'
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


async def nodes(c):
    ns = (await c.get_namespace_array()).index(NS)
    return (
        c.get_node(ua.NodeId("Roles.Setpoint", ns)),
        c.get_node(ua.NodeId("Roles.Secret", ns)),
        c.get_node(ua.NodeId("Roles.Open", ns)),
    )


async def read_attr(node, attr):
    return (await node.read_attributes([attr]))[0]


def role_entries(dv):
    return sorted((e.RoleId, e.Permissions) for e in dv.Value.Value)


def test_observer_reads_what_its_role_allows(roles_server):
    async def body():
        c = await login(roles_server.url, "viewer", "viewer-pw")
        try:
            setpoint, secret, open_ = await nodes(c)
            assert await setpoint.read_value() == 42.5
            with pytest.raises(uaerrors.BadUserAccessDenied):
                await setpoint.write_value(ua.DataValue(ua.Variant(1.0, ua.VariantType.Double)))
            with pytest.raises(uaerrors.BadUserAccessDenied):
                await secret.read_value()
            # Only what its permissions allow: CurrentRead, not CurrentWrite.
            ual = await read_attr(setpoint, ua.AttributeIds.UserAccessLevel)
            assert ual.Value.Value == 1
            # Observer lacks ReadRolePermissions; UserRolePermissions shows its own entry.
            rp = await read_attr(setpoint, ua.AttributeIds.RolePermissions)
            assert rp.StatusCode.value == ua.StatusCodes.BadUserAccessDenied
            urp = await read_attr(setpoint, ua.AttributeIds.UserRolePermissions)
            assert role_entries(urp) == [(OBSERVER, 0x21)]
            # Secret is not even seen in Browse.
            names = {(await n.read_browse_name()).Name for n in await c.nodes.objects.get_children()}
            assert "Setpoint" in names and "Open" in names and "Secret" not in names
            # No RolePermissions: the default rule (an Observer may not write).
            assert await open_.read_value() == 1.0
            with pytest.raises(uaerrors.BadUserAccessDenied):
                await open_.write_value(ua.DataValue(ua.Variant(2.0, ua.VariantType.Double)))
        finally:
            await c.disconnect()

    run(body())


def test_engineer_writes_and_reads_the_role_permissions(roles_server):
    async def body():
        c = await login(roles_server.url, "engineer", "engineer-pw")
        try:
            setpoint, secret, open_ = await nodes(c)
            await setpoint.write_value(ua.DataValue(ua.Variant(17.25, ua.VariantType.Double)))
            assert await setpoint.read_value() == 17.25
            assert await secret.read_value() == 7.0
            rp = await read_attr(setpoint, ua.AttributeIds.RolePermissions)
            assert role_entries(rp) == sorted([(OBSERVER, 0x21), (ENGINEER, 0x63)])
            urp = await read_attr(setpoint, ua.AttributeIds.UserRolePermissions)
            assert role_entries(urp) == [(ENGINEER, 0x63)]
            ual = await read_attr(setpoint, ua.AttributeIds.UserAccessLevel)
            assert ual.Value.Value == 3
            # Engineer is a writing role: nodes without RolePermissions are writable to it.
            await open_.write_value(ua.DataValue(ua.Variant(5.0, ua.VariantType.Double)))
            assert await open_.read_value() == 5.0
        finally:
            await c.disconnect()

    run(body())


def test_anonymous_sessions_and_the_role_set(roles_server):
    async def body():
        c = await login(roles_server.url)
        try:
            setpoint, secret, _ = await nodes(c)
            # anonymous = "read": Anonymous and Observer.
            assert await setpoint.read_value() in (42.5, 17.25)
            with pytest.raises(uaerrors.BadUserAccessDenied):
                await secret.read_value()
            role_set = c.get_node(ua.NodeId(ua.ObjectIds.Server_ServerCapabilities_RoleSet))
            observer = await role_set.get_child(["0:Observer"])
            rules = await (await observer.get_child(["0:Identities"])).read_value()
            got = sorted((r.CriteriaType, r.Criteria) for r in rules)
            assert got == sorted([(ua.IdentityCriteriaType.Anonymous, ""), (ua.IdentityCriteriaType.UserName, "viewer")])
            engineer = await role_set.get_child(["0:Engineer"])
            rules = await (await engineer.get_child(["0:Identities"])).read_value()
            assert [(r.CriteriaType, r.Criteria) for r in rules] == [(ua.IdentityCriteriaType.UserName, "engineer")]
            assert await (await engineer.get_child(["0:ApplicationsExclude"])).read_value() is True
            assert await (await engineer.get_child(["0:Applications"])).read_value() == []
        finally:
            await c.disconnect()

    run(body())
