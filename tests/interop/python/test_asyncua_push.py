"""Part 12 push certificate management, asyncua against the real uaring binary.

A SecurityAdmin client (Basic256Sha256 SignAndEncrypt, UserName token) has the server make a
signing request (CreateSigningRequest with a new key), signs it with a test CA (Python's
`cryptography`, as a plant's CA would), installs it (UpdateCertificate), adds a new client's
certificate to the trust list through the TrustList file object (Open/Read/Close to read it,
Open(Write+EraseExisting)/Write/CloseAndUpdate to write it), then ApplyChanges. A new
connection then gets the new server certificate, and the client that was added is accepted.
A non-admin user is refused with BadUserAccessDenied; a None channel with
BadSecurityModeInsufficient.
"""
import asyncio
import datetime
import time

import pytest
from asyncua import Client, ua
from asyncua.crypto import security_policies as sp
from asyncua.ua import uaerrors
from asyncua.ua.ua_binary import struct_from_binary, struct_to_binary
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from conftest import Server
from test_asyncua_security import Identity, uaring

SERVER_URI = "urn:uaring:test:push"
SERVER_CONFIGURATION = ua.NodeId(12637)
CREATE_SIGNING_REQUEST = ua.NodeId(12737)
UPDATE_CERTIFICATE = ua.NodeId(13737)
APPLY_CHANGES = ua.NodeId(12740)
GET_REJECTED_LIST = ua.NodeId(12777)
DEFAULT_APPLICATION_GROUP = ua.NodeId(14156)
CERTIFICATE_TYPES = ua.NodeId(14161)
RSA_SHA256_TYPE = ua.NodeId(12560)
TRUST_LIST = ua.NodeId(12642)
TL_OPEN = ua.NodeId(12647)
TL_CLOSE = ua.NodeId(12650)
TL_READ = ua.NodeId(12652)
TL_WRITE = ua.NodeId(12655)
TL_CLOSE_AND_UPDATE = ua.NodeId(12666)
TL_ADD_CERTIFICATE = ua.NodeId(12668)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("uaring-push")
    pki = root / "server-pki"
    admin_app = Identity(root, "admin-app", "urn:uaring:test:push-admin")
    newcomer = Identity(root, "newcomer", "urn:uaring:test:push-newcomer")
    uaring("cert", "--pki", str(pki), "trust", str(admin_app.cert))
    # The server's own certificate, made before the start so the test knows it.
    uaring("cert", "--pki", str(pki), "generate", "--uri", SERVER_URI, "--name", "uaring push")
    admin_hash = uaring("hash-password", stdin="admin-pw\n").strip()
    op_hash = uaring("hash-password", stdin="op-pw\n").strip()
    cfg = root / "uaring.toml"
    cfg.write_text(
        f'[application]\napplication_uri = "{SERVER_URI}"\n'
        '[security]\nrescan_interval_ms = 200\npolicies = ["None", "Basic256Sha256"]\n'
        f'[[users]]\nname = "secadmin"\npassword = "{admin_hash}"\nroles = ["SecurityAdmin"]\n'
        f'[[users]]\nname = "operator"\npassword = "{op_hash}"\nroles = ["Operator"]\n'
    )
    server = Server("--pki", str(pki), "--config", str(cfg))
    yield {"server": server, "pki": pki, "admin_app": admin_app, "newcomer": newcomer}
    code = server.stop()
    assert code == 0, f"uaring exited with {code} on SIGTERM"


async def secure_client(url, ident, user=None, password=None):
    c = Client(url, timeout=10)
    c.application_uri = ident.uri
    await c.set_security(
        sp.SecurityPolicyBasic256Sha256,
        certificate=str(ident.cert),
        private_key=str(ident.key),
        mode=ua.MessageSecurityMode.SignAndEncrypt,
    )
    if user is not None:
        c.set_user(user)
        c.set_password(password)
    await c.connect()
    return c


def test_channel_modes_and_roles_are_enforced(env):
    async def body():
        c = await secure_client(env["server"].url, env["admin_app"], "operator", "op-pw")
        try:
            sc = c.get_node(SERVER_CONFIGURATION)
            with pytest.raises(uaerrors.BadUserAccessDenied):
                await sc.call_method(GET_REJECTED_LIST)
            with pytest.raises(uaerrors.BadUserAccessDenied):
                await c.get_node(TRUST_LIST).call_method(TL_OPEN, ua.Variant(1, ua.VariantType.Byte))
            # The certificate types present (RSA only here).
            types = await c.get_node(CERTIFICATE_TYPES).read_value()
            assert types == [RSA_SHA256_TYPE]
        finally:
            await c.disconnect()
        # No security: BadSecurityModeInsufficient, whatever the user.
        c = Client(env["server"].url, timeout=10)
        await c.connect()
        try:
            with pytest.raises(uaerrors.BadSecurityModeInsufficient):
                await c.get_node(SERVER_CONFIGURATION).call_method(GET_REJECTED_LIST)
        finally:
            await c.disconnect()

    run(body())


def make_ca():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "uaring test plant CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def sign_csr(csr_der, ca_key, ca_cert):
    csr = x509.load_der_x509_csr(csr_der)
    assert csr.is_signature_valid
    san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert SERVER_URI in san.get_values_for_type(x509.UniformResourceIdentifier)
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(csr.subject)
        .issuer_name(ca_cert.subject)
        .public_key(csr.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=90))
        .add_extension(san, critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=True, key_encipherment=True,
                data_encipherment=True, key_agreement=False, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(csr.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.DER)


async def read_trust_list(c):
    tl = c.get_node(TRUST_LIST)
    handle = await tl.call_method(TL_OPEN, ua.Variant(1, ua.VariantType.Byte))
    data = b""
    try:
        while True:
            chunk = await tl.call_method(
                TL_READ, ua.Variant(handle, ua.VariantType.UInt32), ua.Variant(4096, ua.VariantType.Int32)
            )
            if not chunk:
                break
            data += chunk
    finally:
        await tl.call_method(TL_CLOSE, ua.Variant(handle, ua.VariantType.UInt32))
    return struct_from_binary(ua.TrustListDataType, ua.utils.Buffer(data))


def test_push_update_replaces_the_certificate_and_trusts_a_new_client(env):
    server, pki = env["server"], env["pki"]
    old_cert = (pki / "own" / "certs" / "uaring.der").read_bytes()
    newcomer_der = env["newcomer"].cert.read_bytes()
    ca_key, ca_cert = make_ca()
    ca_der = ca_cert.public_bytes(serialization.Encoding.DER)

    async def refused_before():
        try:
            c = await secure_client(server.url, env["newcomer"])
        except ua.UaStatusCodeError as e:
            # The server's ERR to the OpenSecureChannel of an untrusted certificate.
            assert e.code == ua.StatusCodes.BadSecurityChecksFailed, repr(e)
            return True
        await c.disconnect()
        return False

    assert run(refused_before()), "the newcomer must not be trusted yet"

    async def push():
        c = await secure_client(server.url, env["admin_app"], "secadmin", "admin-pw")
        try:
            sc = c.get_node(SERVER_CONFIGURATION)
            csr = await sc.call_method(
                CREATE_SIGNING_REQUEST,
                ua.Variant(DEFAULT_APPLICATION_GROUP, ua.VariantType.NodeId),
                ua.Variant(RSA_SHA256_TYPE, ua.VariantType.NodeId),
                ua.Variant("CN=uaring push, O=Test Plant", ua.VariantType.String),
                ua.Variant(True, ua.VariantType.Boolean),
                ua.Variant(b"\x5a" * 32, ua.VariantType.ByteString),
            )
            new_cert = sign_csr(csr, ca_key, ca_cert)
            required = await sc.call_method(
                UPDATE_CERTIFICATE,
                ua.Variant(DEFAULT_APPLICATION_GROUP, ua.VariantType.NodeId),
                ua.Variant(RSA_SHA256_TYPE, ua.VariantType.NodeId),
                ua.Variant(new_cert, ua.VariantType.ByteString),
                ua.Variant([ca_der], ua.VariantType.ByteString),
                ua.Variant("", ua.VariantType.String),
                ua.Variant(b"", ua.VariantType.ByteString),
            )
            assert required is True
            # Not live before ApplyChanges: the endpoints still carry the old certificate.
            eps = await c.get_endpoints()
            assert all(e.ServerCertificate == old_cert for e in eps if e.SecurityPolicyUri != sp.SecurityPolicyNone.URI)

            # The trust list through the file object: read it, add the newcomer, write it.
            current = await read_trust_list(c)
            assert env["admin_app"].cert.read_bytes() in current.TrustedCertificates
            assert newcomer_der not in current.TrustedCertificates
            new_list = ua.TrustListDataType()
            new_list.SpecifiedLists = 1  # TrustedCertificates
            new_list.TrustedCertificates = current.TrustedCertificates + [newcomer_der]
            data = struct_to_binary(new_list)
            tl = c.get_node(TRUST_LIST)
            handle = await tl.call_method(TL_OPEN, ua.Variant(6, ua.VariantType.Byte))
            for i in range(0, len(data), 1000):
                await tl.call_method(
                    TL_WRITE,
                    ua.Variant(handle, ua.VariantType.UInt32),
                    ua.Variant(data[i : i + 1000], ua.VariantType.ByteString),
                )
            required = await tl.call_method(TL_CLOSE_AND_UPDATE, ua.Variant(handle, ua.VariantType.UInt32))
            assert required is False
            after = await read_trust_list(c)
            assert newcomer_der in after.TrustedCertificates
            # A garbage certificate is refused by AddCertificate.
            with pytest.raises(uaerrors.BadCertificateInvalid):
                await tl.call_method(
                    TL_ADD_CERTIFICATE,
                    ua.Variant(b"not a certificate", ua.VariantType.ByteString),
                    ua.Variant(True, ua.VariantType.Boolean),
                )
            await sc.call_method(APPLY_CHANGES)
        finally:
            try:
                await c.disconnect()
            except Exception:  # noqa: BLE001 - the server closes channels of the old certificate
                pass
        return new_cert

    new_cert = run(push())
    # The new certificate and key are on disk, together.
    assert (pki / "own" / "certs" / "uaring.der").read_bytes() == new_cert

    async def new_connection_sees_both():
        c = await secure_client(server.url, env["newcomer"])
        try:
            eps = await c.get_endpoints()
            secured = [e for e in eps if e.SecurityPolicyUri != sp.SecurityPolicyNone.URI]
            assert secured and all(e.ServerCertificate == new_cert for e in secured)
            value = await c.get_node(ua.NodeId(2259)).read_value()  # Server.ServerStatus.State
            assert value == ua.ServerState.Running
        finally:
            await c.disconnect()

    # The trust list is reloaded within rescan_interval_ms + 200 ms.
    deadline = time.monotonic() + 5
    while True:
        try:
            run(new_connection_sees_both())
            break
        except Exception:  # noqa: BLE001
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    assert server.alive()
