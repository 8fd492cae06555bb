"""asyncua (PyPI): the gateway's identity mapping (docs/Gateway.md "Identity mapping").

uaring downstream with anonymous logins off and three users: `gw` (the gateway's main
session: browsing, subscriptions, Reads; it may write, so the mirror offers writing), `dw`
(may write) and `dr` (may only read). The
gateway, over Basic256Sha256 SignAndEncrypt, maps its own users:

- `alice` -> `dw` (password from a file): her Write passes and is seen on the downstream;
- `bob` -> `dr`: his Write is refused by the downstream, BadUserAccessDenied coming back;
- `carol` (no entry, `unmapped = "refuse"`): BadUserAccessDenied here, nothing sent.

The same for a Call of a method that needs a writing user there (Demo's GenerateEvent),
and a HistoryRead (alice's in her identity's session, carol's refused).

The downstream's session list names each identity session; `max_identity_sessions = 1`
makes bob's session take the place of alice's unused one, and `identity_idle_ms` closes
bob's when unused.
"""
import asyncio
import signal
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest
from asyncua import Client, ua
from asyncua.ua import uaerrors

from conftest import Server
from test_asyncua_gateway import free_port, mirrored, until
from test_asyncua_security import uaring

SESSIONS = ua.NodeId(3707)  # Server.ServerDiagnostics.SessionsDiagnosticsSummary.SessionDiagnosticsArray
DOUBLE = "ns=1;s=Demo.Static.Double"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def hashed(pw):
    return uaring("hash-password", stdin=f"{pw}\n").strip()


async def connect(url, user, password):
    c = Client(url, timeout=10)
    c.set_user(user)
    c.set_password(password)
    await c.connect()
    return c


async def metric(port, line_start):
    """The value of the metrics line that begins with `line_start`."""

    def get():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()

    text = await asyncio.get_running_loop().run_in_executor(None, get)
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    return None


async def session_names(c):
    return {s.SessionName or "" for s in await c.get_node(SESSIONS).read_value()}


def test_writes_run_as_the_callers_mapped_identity(tmp_path):
    dcfg = tmp_path / "down.toml"
    dcfg.write_text(
        f'[history]\ndir = "{tmp_path / "down-history"}"\n'
        '[security]\nanonymous = "off"\n'
        f'[[users]]\nname = "gw"\npassword = "{hashed("gw-pw")}"\nrole = "readwrite"\n'
        f'[[users]]\nname = "dw"\npassword = "{hashed("dw-pw")}"\nrole = "readwrite"\n'
        f'[[users]]\nname = "dr"\npassword = "{hashed("dr-pw")}"\nrole = "read"\n'
    )
    down = Server("--pki", str(tmp_path / "down-pki"), "--accept-all-client-certs",
                  "--config", str(dcfg))
    dw_pw = tmp_path / "dw.pw"
    dw_pw.write_text("dw-pw\n")
    gcfg = tmp_path / "gw.toml"
    metrics_port = free_port()
    gcfg.write_text(
        f'[history]\ndir = "{tmp_path / "gw-history"}"\n'
        f'[metrics]\nlisten = "127.0.0.1:{metrics_port}"\n'
        '[security]\nanonymous = "off"\n'
        f'[[users]]\nname = "alice"\npassword = "{hashed("a-pw")}"\nrole = "readwrite"\n'
        f'[[users]]\nname = "bob"\npassword = "{hashed("b-pw")}"\nrole = "readwrite"\n'
        f'[[users]]\nname = "carol"\npassword = "{hashed("c-pw")}"\nrole = "readwrite"\n'
        "[[gateway.servers]]\n"
        'name = "s"\n'
        f'endpoint = "{down.url}"\n'
        'security_policy = "Basic256Sha256"\nsecurity_mode = "SignAndEncrypt"\n'
        f'server_certificate = "{tmp_path / "down-pki" / "own" / "certs" / "uaring.der"}"\n'
        'user = "gw"\npassword = "gw-pw"\n'
        'mirror = ["nsu=urn:uaring:server;s=Demo.Static", "nsu=urn:uaring:server;s=Demo.Methods",'
        ' "nsu=urn:uaring:server;s=Demo.History"]\n'
        'unmapped = "refuse"\nmax_identity_sessions = 1\nidentity_idle_ms = 2000\n'
        "[[gateway.servers.identities]]\n"
        f'upstream_user = "alice"\nuser = "dw"\npassword_file = "{dw_pw}"\n'
        "[[gateway.servers.identities]]\n"
        'upstream_user = "bob"\nuser = "dr"\npassword = "dr-pw"\n'
    )
    gw = Server("--pki", str(tmp_path / "gw-pki"), "--config", str(gcfg))
    try:

        async def go():
            d = await connect(down.url, "dw", "dw-pw")
            alice = await connect(gw.url, "alice", "a-pw")
            bob = await connect(gw.url, "bob", "b-pw")
            carol = await connect(gw.url, "carol", "c-pw")
            try:
                there = d.get_node(DOUBLE)
                a_double = await mirrored(alice, "s", "Static", "Double")
                await a_double.write_value(ua.DataValue(ua.Variant(41.5, ua.VariantType.Double)))

                async def written():
                    return await there.read_value() == 41.5

                await until("alice's write on the downstream", written)
                names = await until(
                    "alice's identity session on the downstream",
                    lambda: _with(d, "(user alice as user dw)"),
                )
                assert not any("(user bob" in n for n in names), names
                gauge = 'uaring_gateway_identity_sessions{server="s"}'
                assert await metric(metrics_port, gauge) == 1
                # The same count in the server's status Property (stored within a second).
                sessions = await mirrored(alice, "s", "IdentitySessions")
                await until("IdentitySessions 1", lambda: _value_is(sessions, 1))

                b_double = bob.get_node(a_double.nodeid)
                with pytest.raises(uaerrors.BadUserAccessDenied):
                    await b_double.write_value(
                        ua.DataValue(ua.Variant(7.0, ua.VariantType.Double)))
                assert await there.read_value() == 41.5
                # One identity session at most: bob's took the place of alice's.
                names = await until(
                    "bob's identity session on the downstream",
                    lambda: _with(d, "(user bob as user dr)"),
                )
                assert not any("(user alice" in n for n in names), names

                c_double = carol.get_node(a_double.nodeid)
                with pytest.raises(uaerrors.BadUserAccessDenied):
                    await c_double.write_value(
                        ua.DataValue(ua.Variant(8.0, ua.VariantType.Double)))
                assert await there.read_value() == 41.5
                assert not any("carol" in n for n in await session_names(d))

                # Reads run on the main session, whoever asks (gw may read).
                rv = ua.ReadValueId(NodeId=a_double.nodeid, AttributeId=ua.AttributeIds.Value)
                (fresh,) = await carol.uaclient.read(ua.ReadParameters(MaxAge=0, NodesToRead=[rv]))
                assert fresh.StatusCode.is_good() and fresh.Value.Value == 41.5, fresh

                # Unused for identity_idle_ms: bob's session is closed.
                async def closed():
                    names = await session_names(d)
                    return not any("(user bob" in n for n in names) and names

                names = await until("bob's idle session closed", closed)
                assert any(n == "uaring gateway s" for n in names), names
                assert await metric(metrics_port, gauge) == 0
                await until("IdentitySessions 0", lambda: _value_is(sessions, 0))

                # Alice again: her session is opened again, her write passes.
                await a_double.write_value(ua.DataValue(ua.Variant(42.5, ua.VariantType.Double)))

                async def again():
                    return await there.read_value() == 42.5

                await until("alice's second write on the downstream", again)

                # Calls take the same way: GenerateEvent needs a writing user there.
                methods = await mirrored(alice, "s", "Methods")
                generate = await mirrored(alice, "s", "Methods", "GenerateEvent")
                args = ("from the gateway", ua.Variant(300, ua.VariantType.UInt16))
                await methods.call_method(generate, *args)
                for who in (bob, carol):
                    with pytest.raises(uaerrors.BadUserAccessDenied):
                        await who.get_node(methods.nodeid).call_method(generate.nodeid, *args)

                # HistoryRead too: alice's runs in her identity's session (bob's, unused,
                # makes room), carol's is refused here.
                count = await mirrored(alice, "s", "History", "Count")
                end = datetime.now(timezone.utc) + timedelta(seconds=5)

                async def two():
                    vs = await count.read_raw_history(end - timedelta(minutes=1), end)
                    return vs if len(vs) >= 2 else None

                await until("two values of Count's history through the gateway", two)
                # Only the history read can have opened hers again.
                await until(
                    "alice's identity session again on the downstream",
                    lambda: _with(d, "(user alice as user dw)"),
                )
                with pytest.raises(uaerrors.BadUserAccessDenied):
                    await carol.get_node(count.nodeid).read_raw_history(
                        end - timedelta(minutes=1), end)

                # Her continuation points are released in her session there: eleven reads
                # that each leave one (the downstream keeps ten a session) and release it
                # here all pass; then, unused, her session is closed as any other.
                details = ua.ReadRawModifiedDetails(
                    IsReadModified=False,
                    StartTime=end - timedelta(minutes=1),
                    EndTime=end,
                    NumValuesPerNode=1,
                    ReturnBounds=False,
                )
                for i in range(11):
                    first = await count.history_read(details)
                    assert first.StatusCode.is_good() and first.ContinuationPoint, (i, first)
                    p = ua.HistoryReadParameters(
                        HistoryReadDetails=details,
                        TimestampsToReturn=ua.TimestampsToReturn.Both,
                        ReleaseContinuationPoints=True,
                        NodesToRead=[ua.HistoryReadValueId(
                            NodeId=count.nodeid, ContinuationPoint=first.ContinuationPoint)],
                    )
                    (released,) = await alice.uaclient.history_read(p)
                    assert released.StatusCode.is_good(), (i, released)

                async def alice_closed():
                    names = await session_names(d)
                    return not any("(user alice" in n for n in names) and names

                await until("alice's idle session closed", alice_closed)
                assert await metric(metrics_port, gauge) == 0
            finally:
                for c in (carol, bob, alice, d):
                    await c.disconnect()

        run(go())
    finally:
        down.stop()
        assert gw.stop() == 0


async def _value_is(node, value):
    return await node.read_value() == value


async def _with(c, part):
    names = await session_names(c)
    return names if any(part in n for n in names) else None


def test_a_reload_applies_a_changed_identity_table(tmp_path):
    """A login the downstream refuses (a wrong password) answers the mapped caller's Writes
    with the downstream's refusal. SIGHUP re-reads `[[gateway.servers.identities]]` like the
    rest of the entry: a table naming a missing password file is refused (the old one stays),
    a changed one maps bob to the writing user."""
    dcfg = tmp_path / "down.toml"
    dcfg.write_text(
        '[security]\nanonymous = "off"\n'
        f'[[users]]\nname = "gw"\npassword = "{hashed("gw-pw")}"\nrole = "readwrite"\n'
        f'[[users]]\nname = "dw"\npassword = "{hashed("dw-pw")}"\nrole = "readwrite"\n'
        f'[[users]]\nname = "dr"\npassword = "{hashed("dr-pw")}"\nrole = "read"\n'
    )
    down = Server("--pki", str(tmp_path / "down-pki"), "--accept-all-client-certs",
                  "--config", str(dcfg))
    metrics_port = free_port()
    head = (
        f'[metrics]\nlisten = "127.0.0.1:{metrics_port}"\n'
        '[security]\nanonymous = "off"\n'
        f'[[users]]\nname = "bob"\npassword = "{hashed("b-pw")}"\nrole = "readwrite"\n'
        f'[[users]]\nname = "eve"\npassword = "{hashed("e-pw")}"\nrole = "readwrite"\n'
        "[[gateway.servers]]\n"
        'name = "s"\n'
        f'endpoint = "{down.url}"\n'
        'security_policy = "Basic256Sha256"\nsecurity_mode = "SignAndEncrypt"\n'
        f'server_certificate = "{tmp_path / "down-pki" / "own" / "certs" / "uaring.der"}"\n'
        'user = "gw"\npassword = "gw-pw"\n'
        'mirror = ["nsu=urn:uaring:server;s=Demo.Static"]\n'
        'unmapped = "refuse"\n'
        "[[gateway.servers.identities]]\n"
        'upstream_user = "bob"\n'
    )
    gcfg = tmp_path / "gw.toml"
    gcfg.write_text(
        head + 'user = "dr"\npassword = "dr-pw"\n'
        # A login the downstream refuses: eve's operations get its refusal.
        '[[gateway.servers.identities]]\nupstream_user = "eve"\nuser = "dw"\npassword = "wrong"\n'
    )
    gw = Server("--pki", str(tmp_path / "gw-pki"), "--config", str(gcfg))
    try:

        async def go():
            d = await connect(down.url, "dw", "dw-pw")
            bob = await connect(gw.url, "bob", "b-pw")
            eve = await connect(gw.url, "eve", "e-pw")
            try:
                there = d.get_node(DOUBLE)
                double = await mirrored(bob, "s", "Static", "Double")

                async def write(v):
                    await bob.get_node(double.nodeid).write_value(
                        ua.DataValue(ua.Variant(v, ua.VariantType.Double)))

                with pytest.raises(uaerrors.BadUserAccessDenied):
                    await write(1.25)
                refusals = set()
                for _ in range(2):  # the second within 5 s: the same refusal, at once
                    with pytest.raises(uaerrors.UaStatusCodeError) as e:
                        await eve.get_node(double.nodeid).write_value(
                            ua.DataValue(ua.Variant(9.0, ua.VariantType.Double)))
                    refusals.add(e.value.code)
                # uaring's refusal of a wrong password, as it gave it; one login tried.
                assert refusals == {ua.StatusCodes.BadUserAccessDenied}, refusals
                refused = 'uaring_gateway_identity_refusals_total{server="s"}'
                assert await metric(metrics_port, refused) == 1
                assert await there.read_value() != 9.0
                gcfg.write_text(
                    head + f'user = "dw"\npassword_file = "{tmp_path / "missing.pw"}"\n')
                gw.proc.send_signal(signal.SIGHUP)
                await asyncio.sleep(1.0)
                with pytest.raises(uaerrors.BadUserAccessDenied):
                    await write(1.5)
                assert await there.read_value() != 1.5
                gcfg.write_text(head + 'user = "dw"\npassword = "dw-pw"\n')
                gw.proc.send_signal(signal.SIGHUP)

                async def written():
                    try:
                        await write(2.75)
                    except uaerrors.UaStatusCodeError:
                        return False
                    return await there.read_value() == 2.75

                await until("bob's write as dw after the reload", written)
            finally:
                for c in (eve, bob, d):
                    await c.disconnect()

        run(go())
    finally:
        down.stop()
        assert gw.stop() == 0
