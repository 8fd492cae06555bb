#!/usr/bin/env python3
"""Benchmark-contract OPC UA server on o6 (open62541 1.5.8 under Python).

100 Int32 variables ns=1;i=1001..1100 named BenchmarkValue<i> (initial value i),
readable and writable, under Objects; ApplicationUri urn:o6:benchmark:server.
Prints `listening on opc.tcp://127.0.0.1:PORT` and `benchmark server ready`;
exits on SIGTERM/SIGINT. The PyPI wheel runs in ten-minute script mode, which
is longer than any single benchmark run.

    python o6_server.py --port 4840 [--secure]
"""
import argparse
import signal
import sys
import threading

import o6


def self_signed(uri: str):
    """A self-signed RSA-2048 application certificate (DER) and key (DER)."""
    import datetime
    import socket

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "uaring benchmark o6"), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "uaring")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(uri), x509.DNSName(socket.gethostname()), x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, content_commitment=True, key_encipherment=True, data_encipherment=True, key_agreement=False, key_cert_sign=True, crl_sign=False, encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.DER), key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=4840)
    p.add_argument("--secure", action="store_true", help="also offer Basic256Sha256 etc. with a fresh self-signed certificate, accepting every client certificate")
    a = p.parse_args()
    kw = {}
    if a.secure:
        cert, key = self_signed("urn:o6:benchmark:server")
        kw = dict(certificate=cert, privateKey=key, acceptAllCertificates=True)
    server = o6.Server(port=a.port, applicationUri="urn:o6:benchmark:server", **kw)
    for i in range(100):
        server.addVariable(f"BenchmarkValue{i}", server.objects, o6.Int32(i), nodeId=f"ns=1;i={1001 + i}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    print(f"listening on opc.tcp://127.0.0.1:{a.port}", flush=True)
    print("benchmark server ready", flush=True)
    while not stop.wait(0.5):
        pass
    server.stop()


if __name__ == "__main__":
    main()
    sys.exit(0)
