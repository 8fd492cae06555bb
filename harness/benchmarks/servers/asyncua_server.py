#!/usr/bin/env python3
"""Benchmark-contract OPC UA server on asyncua (pure Python, asyncio).

100 Int32 variables ns=1;i=1001..1100 named BenchmarkValue<i> (initial value i),
readable and writable, under Objects; ApplicationUri urn:o6:benchmark:server.
With --counters N: N UInt64 counters ns=1;i=1..N incremented every
--sampling-ms (the closest a Python server gets to "increments on each sample").
Prints `listening on opc.tcp://HOST:PORT` and `benchmark server ready` once
listening; exits on SIGTERM/SIGINT.

    python asyncua_server.py --port 4840 [--counters N] [--sampling-ms 10] [--events-per-s R]
"""
import argparse
import asyncio
import datetime
import logging
import signal
import sys

from asyncua import Server, ua


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=4840)
    p.add_argument("--counters", type=int, default=0)
    p.add_argument("--sampling-ms", type=float, default=10.0)
    p.add_argument("--events-per-s", type=float, default=0.0, help="emit BaseEventType events from the Server object at this rate")
    a = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    for name in ("asyncua", "asyncua.server", "asyncua.server.uaprocessor"):
        logging.getLogger(name).setLevel(logging.ERROR)

    server = Server()
    await server.init()
    url = f"opc.tcp://{a.host}:{a.port}"
    server.set_endpoint(url + "/")
    server.set_server_name("uaring benchmark (asyncua)")
    await server.set_application_uri("urn:o6:benchmark:server")
    server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
    ns = 1
    objects = server.nodes.objects
    if a.counters > 0:
        counters = []
        for i in range(a.counters):
            v = await objects.add_variable(
                ua.NodeId(1 + i, ns), ua.QualifiedName(f"Counter{i}", ns), ua.Variant(0, ua.VariantType.UInt64)
            )
            counters.append(v)
    else:
        counters = []
        for i in range(100):
            v = await objects.add_variable(
                ua.NodeId(1001 + i, ns), ua.QualifiedName(f"BenchmarkValue{i}", ns), ua.Variant(i, ua.VariantType.Int32)
            )
            await v.set_writable()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def emit_events() -> None:
        gen = await server.get_event_generator()
        period = 1.0 / a.events_per_s
        n = 0
        loop_t = loop.time()
        while not stop.is_set():
            n += 1
            gen.event.Message = ua.LocalizedText(f"benchmark event {n}")
            gen.event.Severity = 100
            await gen.trigger()
            loop_t += period
            delay = loop_t - loop.time()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                except asyncio.TimeoutError:
                    pass

    async with server:
        print(f"listening on {url}", flush=True)
        print("benchmark server ready", flush=True)
        if a.events_per_s > 0:
            asyncio.ensure_future(emit_events())
        if counters:
            n = 0
            period = a.sampling_ms / 1000.0
            next_t = loop.time()
            while not stop.is_set():
                n += 1
                dv = ua.DataValue(ua.Variant(n, ua.VariantType.UInt64), SourceTimestamp=datetime.datetime.now(datetime.timezone.utc))
                for c in counters:
                    await server.write_attribute_value(c.nodeid, dv)
                next_t += period
                delay = next_t - loop.time()
                if delay > 0:
                    try:
                        await asyncio.wait_for(stop.wait(), delay)
                    except asyncio.TimeoutError:
                        pass
        else:
            await stop.wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    sys.exit(0)
