"""asyncua (PyPI) against the real uaring binary with security: every RSA policy in Sign and
SignAndEncrypt (read, write, browse), UserName logins (good, wrong password, unknown user,
read-only role), an untrusted client certificate refused and then accepted once copied into
trusted/certs (no restart), and X.509 user tokens (one whose commonName, with a comma, names a
configured readwrite user).

Certificates are made with the binary itself (`uaring cert generate`), passwords hashed with
`uaring hash-password`; the server runs with `--pki DIR --config FILE` in a temp directory.
"""
import asyncio
import pathlib
import shutil
import subprocess
import time

import pytest
from asyncua import Client, ua
from asyncua.crypto import security_policies as sp
from asyncua.ua import uaerrors

from conftest import Server, uaring_bin

POLICIES = [sp.SecurityPolicyBasic256Sha256, sp.SecurityPolicyAes128Sha256RsaOaep, sp.SecurityPolicyAes256Sha256RsaPss]
MODES = [ua.MessageSecurityMode.Sign, ua.MessageSecurityMode.SignAndEncrypt]
BENCH = ua.NodeId(1001, 1)
OPERATOR_CN = "Operator, Line 2"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def uaring(*args, stdin=None):
    return subprocess.run([uaring_bin(), *args], input=stdin, capture_output=True, text=True, check=True).stdout


class Identity:
    """An application instance certificate + key made by `uaring cert generate`."""

    def __init__(self, root, name, uri, common_name=None):
        self.dir = root / name
        self.uri = uri
        uaring("cert", "--pki", str(self.dir), "generate", "--uri", uri, "--name", common_name or name)
        self.cert = self.dir / "own" / "certs" / "uaring.der"
        self.key = self.dir / "own" / "private" / "uaring.pem"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("uaring-sec")
    pki = root / "server-pki"
    trusted = Identity(root, "asyncua-client", "urn:uaring:test:asyncua")
    untrusted = Identity(root, "asyncua-stranger", "urn:uaring:test:stranger")
    user = Identity(root, "asyncua-x509-user", "urn:uaring:test:x509user")
    # A CN with a comma that names a configured readwrite user.
    operator = Identity(root, "asyncua-x509-operator", "urn:uaring:test:x509operator", OPERATOR_CN)
    uaring("cert", "--pki", str(pki), "trust", str(trusted.cert))
    uaring("cert", "--pki", str(pki), "trust", str(user.cert))
    uaring("cert", "--pki", str(pki), "trust", str(operator.cert))
    admin_hash = uaring("hash-password", stdin="admin-pw\n").strip()
    reader_hash = uaring("hash-password", stdin="reader-pw\n").strip()
    cfg = root / "uaring.toml"
    cfg.write_text(
        "[security]\nrescan_interval_ms = 500\n[transport]\nmin_token_lifetime_ms = 1000\n"
        f'[[users]]\nname = "admin"\npassword = "{admin_hash}"\nrole = "readwrite"\n'
        f'[[users]]\nname = "reader"\npassword = "{reader_hash}"\nrole = "read"\n'
        f'[[users]]\nname = "{OPERATOR_CN}"\npassword = "{admin_hash}"\nrole = "readwrite"\n'
    )
    server = Server("--pki", str(pki), "--config", str(cfg))
    yield {"server": server, "pki": pki, "trusted": trusted, "untrusted": untrusted, "user": user, "operator": operator}
    code = server.stop()
    assert code == 0, f"uaring exited with {code} on SIGTERM"


async def secure_client(url, ident, policy, mode, user=None, password=None):
    c = Client(url, timeout=10)
    c.application_uri = ident.uri
    await c.set_security(policy, certificate=str(ident.cert), private_key=str(ident.key), mode=mode)
    if user is not None:
        c.set_user(user)
        c.set_password(password)
    return c


async def read_write_browse(c, value):
    node = c.get_node(BENCH)
    await node.write_value(ua.DataValue(ua.Variant(value, ua.VariantType.Int32)))
    assert await node.read_value() == value
    names = {(await n.read_browse_name()).Name for n in await c.nodes.objects.get_children()}
    assert "Server" in names


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.URI.rsplit("#", 1)[1])
def test_policy_mode_read_write_browse(env, policy, mode):
    async def body():
        c = await secure_client(env["server"].url, env["trusted"], policy, mode)
        await c.connect()
        try:
            assert c.security_policy.URI == policy.URI
            await read_write_browse(c, 4000 + mode.value)
        finally:
            await c.disconnect()

    run(body())


def test_get_endpoints_lists_every_policy_mode_and_token(env):
    async def body():
        c = Client(env["server"].url, timeout=10)
        eps = await c.connect_and_get_server_endpoints()
        pairs = {(e.SecurityPolicyUri.rsplit("#", 1)[1], e.SecurityMode) for e in eps}
        for p in POLICIES:
            for m in MODES:
                assert (p.URI.rsplit("#", 1)[1], m) in pairs
        assert ("None", ua.MessageSecurityMode.None_) in pairs
        der = env["server"] and (env["pki"] / "own" / "certs" / "uaring.der").read_bytes()
        for e in eps:
            kinds = {t.TokenType for t in e.UserIdentityTokens}
            assert ua.UserTokenType.Anonymous in kinds and ua.UserTokenType.UserName in kinds
            if e.SecurityMode != ua.MessageSecurityMode.None_:
                assert e.ServerCertificate == der
            else:
                # On None endpoints the password is RSA-encrypted with Basic256Sha256.
                un = [t for t in e.UserIdentityTokens if t.TokenType == ua.UserTokenType.UserName][0]
                assert un.SecurityPolicyUri == sp.SecurityPolicyBasic256Sha256.URI

    run(body())


def test_username_login_over_sign_and_encrypt(env):
    async def body():
        url = env["server"].url
        mode = ua.MessageSecurityMode.SignAndEncrypt
        c = await secure_client(url, env["trusted"], sp.SecurityPolicyBasic256Sha256, mode, "admin", "admin-pw")
        await c.connect()
        try:
            await read_write_browse(c, 77)
        finally:
            await c.disconnect()
        for user, pw in (("admin", "wrong"), ("nobody", "admin-pw")):
            c = await secure_client(url, env["trusted"], sp.SecurityPolicyAes256Sha256RsaPss, mode, user, pw)
            with pytest.raises(uaerrors.BadUserAccessDenied):
                await c.connect()
            await c.disconnect()

    run(body())


def test_read_only_user_cannot_write(env):
    async def body():
        mode = ua.MessageSecurityMode.SignAndEncrypt
        c = await secure_client(env["server"].url, env["trusted"], sp.SecurityPolicyAes128Sha256RsaOaep, mode, "reader", "reader-pw")
        await c.connect()
        try:
            node = c.get_node(BENCH)
            await node.read_value()
            with pytest.raises(uaerrors.BadUserAccessDenied):
                await node.write_value(ua.DataValue(ua.Variant(5, ua.VariantType.Int32)))
            level = await node.read_attribute(ua.AttributeIds.UserAccessLevel)
            assert level.Value.Value & ua.AccessLevel.CurrentRead.mask
            assert not level.Value.Value & ua.AccessLevel.CurrentWrite.mask
            level = await node.read_attribute(ua.AttributeIds.AccessLevel)
            assert level.Value.Value & ua.AccessLevel.CurrentWrite.mask
        finally:
            await c.disconnect()

    run(body())


async def x509_user_client(env, user):
    """A SignAndEncrypt client (the trusted application certificate) logged in with `user`'s
    certificate as its X.509 user token, connected."""
    mode = ua.MessageSecurityMode.SignAndEncrypt
    c = await secure_client(env["server"].url, env["trusted"], sp.SecurityPolicyBasic256Sha256, mode)
    await c.load_client_certificate(str(user.cert))
    await c.load_private_key(user.key)
    await c.connect()
    return c


def test_x509_user_token(env):
    async def body():
        c = await x509_user_client(env, env["user"])
        try:
            assert await c.get_node(BENCH).read_value() is not None
            # The certificate's CN names no configured user: security.x509_user_role (read).
            with pytest.raises(uaerrors.BadUserAccessDenied):
                await c.get_node(BENCH).write_value(ua.DataValue(ua.Variant(5, ua.VariantType.Int32)))
        finally:
            await c.disconnect()

    run(body())


def test_x509_user_named_by_a_common_name_with_a_comma(env):
    """The user is the certificate's commonName attribute, not a piece of the formatted subject
    ("CN=Operator, Line 2,O=..." split on commas gave "Operator", no configured user)."""
    async def body():
        c = await x509_user_client(env, env["operator"])
        try:
            # The configured readwrite user: the write is allowed.
            await c.get_node(BENCH).write_value(ua.DataValue(ua.Variant(6, ua.VariantType.Int32)))
            assert await c.get_node(BENCH).read_value() == 6
        finally:
            await c.disconnect()

    run(body())


def test_untrusted_certificate_refused_then_trusted_without_restart(env):
    pki = env["pki"]
    stranger = env["untrusted"]

    async def attempt():
        c = await secure_client(env["server"].url, stranger, sp.SecurityPolicyBasic256Sha256, ua.MessageSecurityMode.SignAndEncrypt)
        try:
            await c.connect()
        except Exception as e:  # noqa: BLE001 - the refusal surfaces as a closed channel / status
            await c.disconnect()
            return e
        try:
            await read_write_browse(c, 91)
        finally:
            await c.disconnect()
        return None

    err = run(attempt())
    assert err is not None, "an untrusted client certificate must be refused"
    # The server's answer to the OpenSecureChannel (an ERR), not some other failure.
    assert isinstance(err, ua.UaStatusCodeError), repr(err)
    assert err.code == ua.StatusCodes.BadSecurityChecksFailed, repr(err)
    rejected = list((pki / "rejected" / "certs").iterdir())
    assert len(rejected) == 1, rejected
    assert env["server"].alive()
    # The operator trusts it: copy into trusted/certs, no restart.
    shutil.copy(rejected[0], pki / "trusted" / "certs" / rejected[0].name)
    start = time.monotonic()
    while True:
        err = run(attempt())
        if err is None:
            break
        assert time.monotonic() - start < 2.0, f"still refused after 2 s: {err!r}"
        time.sleep(0.2)


def test_token_renewal_under_sign_and_encrypt(env):
    async def body():
        c = await secure_client(env["server"].url, env["trusted"], sp.SecurityPolicyBasic256Sha256, ua.MessageSecurityMode.SignAndEncrypt)
        c.secure_channel_timeout = 2000
        await c.connect()
        try:
            first = c.uaclient.protocol._connection.security_token.TokenId
            node = c.get_node(BENCH)
            end = time.monotonic() + 4.5
            while time.monotonic() < end:
                await node.read_value()
                await asyncio.sleep(0.05)
            last = c.uaclient.protocol._connection.security_token.TokenId
            assert last >= first + 2, (first, last)
        finally:
            await c.disconnect()

    run(body())


def test_contract_mode_accepts_any_client_certificate(tmp_path):
    """--contract: Basic256Sha256 SignAndEncrypt with a certificate the server never saw."""
    stranger = Identity(tmp_path, "contract-client", "urn:uaring:test:contract")
    server = Server("--contract", "--pki", str(tmp_path / "contract-pki"))
    try:
        async def body():
            c = await secure_client(server.url, stranger, sp.SecurityPolicyBasic256Sha256, ua.MessageSecurityMode.SignAndEncrypt)
            await c.connect()
            try:
                await read_write_browse(c, 11)
            finally:
                await c.disconnect()

        run(body())
        assert not list((tmp_path / "contract-pki" / "rejected" / "certs").iterdir())
    finally:
        assert server.stop() == 0
