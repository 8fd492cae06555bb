#!/usr/bin/env python3
"""Benchmark-contract OPC UA server on o6 (open62541 1.5.8 under Python).

100 Int32 variables ns=1;i=1001..1100 named BenchmarkValue<i> (initial value i),
readable and writable, under Objects; ApplicationUri urn:o6:benchmark:server.
Prints `listening on opc.tcp://127.0.0.1:PORT` and `benchmark server ready`;
exits on SIGTERM/SIGINT. The PyPI wheel runs in ten-minute script mode, which
is longer than any single benchmark run.

    python o6_server.py --port 4840
"""
import argparse
import signal
import sys
import threading

import o6


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=4840)
    a = p.parse_args()
    server = o6.Server(port=a.port, applicationUri="urn:o6:benchmark:server")
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
