#!/usr/bin/env python3
"""A server of the `history_bench` contract (harness/src/history.rs) on asyncua's own
historian: `asyncua.server.history_sql.HistorySQLite`, the SQLite history asyncua ships, as
its users run it. uaring-bench starts it as `--server-exe` for the side-by-side rows of the
`history` table (docs/Benchmarks.md, harness/benchmarks/history-peers.variants).

    history_bench.py --listen HOST:PORT [--preload N] [--pattern count|slow|random]
                     [--variables N] [--rate HZ] [--db FILE]

* Namespace `urn:uaring:example:history-bench`: `s=History.V<i>` (i in 0..N, default 1)
  Doubles historized in SQLite (`historize_node_data_change`), `s=History.PreloadStart`
  (DateTime) and `s=History.PreloadCount` (UInt64); the benchmark contract's Int32
  `ns=1;i=1001..1100` for the Read load.
* `--preload N`: N samples of `s=History.V0` at 1 Hz, ending on the whole minute at least
  an hour before the start, written before `listening on` is printed: rows of the table
  asyncua made for the node, in the format of its `save_node_value` (one transaction for
  all, where asyncua commits each value: a pre-load, not the measured path). Values by
  `--pattern` as history_bench's: `count` the Double i, `slow` a 0.01 random walk in
  0..=100 from 50, `random` uniform in [0, 1).
* String-id tables: see `SQLiteHistory` (asyncua's table naming refuses them).
* What asyncua's history serves: ReadRawModifiedDetails (continuation points of at most
  its `max_history_data_response_size`, 10,000 by default) and ReadEventDetails;
  ReadProcessedDetails and ReadAtTimeDetails answer Bad_NotImplemented, so the processed
  scenario is "not supported" for it. `--rate` (the ingest scenario) is refused: the
  contract's ingest needs the store's writer counters (`history-stats` lines), which
  asyncua's history does not have.
* SIGINT/SIGTERM stop it.
"""
import argparse
import asyncio
import datetime
import os
import random
import re
import signal
import sqlite3
import sys
import tempfile

from asyncua import Server, ua
from asyncua.server.history_sql import HistorySQLite
from asyncua.ua.ua_binary import variant_to_binary

NAMESPACE = "urn:uaring:example:history-bench"


class SQLiteHistory(HistorySQLite):
    """asyncua's SQLite history, with table names it accepts for string NodeIds: its own
    `_get_table_name` ("2_'History.V0'") fails its own injection check on the quotes, so
    string-id Variables cannot be historized in asyncua 2.1 as shipped. Only the name
    changes; every read and write is asyncua's."""

    def _get_table_name(self, node_id):
        ident = re.sub(r"[^A-Za-z0-9_]", "_", str(node_id.Identifier))
        return f"{node_id.NamespaceIndex}_{ident}"


def pattern_values(pattern, n):
    if pattern == "count":
        return [float(i) for i in range(n)]
    if pattern == "slow":
        rng = random.Random(1)
        level, out = 5000, []
        for _ in range(n):
            out.append(level / 100.0)
            level = min(10000, max(0, level + rng.choice((-1, 0, 1))))
        return out
    if pattern == "random":
        rng = random.Random(1)
        return [rng.random() for _ in range(n)]
    raise SystemExit(f"--pattern {pattern!r}: count, slow or random")


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--listen", default="127.0.0.1:4840")
    p.add_argument("--preload", type=int, default=0)
    p.add_argument("--pattern", default="count")
    p.add_argument("--variables", type=int, default=1)
    p.add_argument("--rate", type=float, default=0.0)
    p.add_argument("--db", default=None)
    a = p.parse_args()
    if a.rate > 0:
        print("history_bench.py: --rate (history-ingest) is not supported on asyncua's history", file=sys.stderr)
        sys.exit(2)
    host, port = a.listen.rsplit(":", 1)
    tmp = None
    if a.db is None:
        tmp = tempfile.mkdtemp(prefix="asyncua-history-")
        a.db = os.path.join(tmp, "history.db")

    server = Server()
    await server.init()
    server.set_endpoint(f"opc.tcp://{host}:{port}")
    server.set_security_policy([ua.SecurityPolicyType.NoSecurity])
    history = SQLiteHistory(a.db)
    await history.init()
    server.iserver.history_manager.set_storage(history)
    ns = await server.register_namespace(NAMESPACE)
    objects = server.nodes.objects
    folder = await objects.add_folder(ua.NodeId("History", ns), "History")
    variables = []
    for i in range(max(1, a.variables)):
        v = await folder.add_variable(ua.NodeId(f"History.V{i}", ns), f"V{i}", 0.0)
        variables.append(v)
    start_node = await folder.add_variable(
        ua.NodeId("History.PreloadStart", ns), "PreloadStart",
        ua.Variant(None, ua.VariantType.DateTime))
    count_node = await folder.add_variable(
        ua.NodeId("History.PreloadCount", ns), "PreloadCount",
        ua.Variant(0, ua.VariantType.UInt64))
    contract = await objects.add_folder(ua.NodeId(1000, 1), "Benchmark")
    for i in range(100):
        await contract.add_variable(ua.NodeId(1001 + i, 1), f"BenchmarkValue{i}",
                                    ua.Variant(i, ua.VariantType.Int32))
    async with server:
        for v in variables:
            await server.historize_node_data_change(v, period=None, count=0)
        if a.preload > 0:
            # Naive UTC, as asyncua stores its own timestamps (sqlite3 converts them back).
            now = datetime.datetime.now(datetime.timezone.utc).replace(
                second=0, microsecond=0, tzinfo=None)
            end = now - datetime.timedelta(hours=1)
            start = end - datetime.timedelta(seconds=a.preload)
            values = pattern_values(a.pattern, a.preload)
            table = history._get_table_name(variables[0].nodeid)
            rows = []
            for i, x in enumerate(values):
                t = start + datetime.timedelta(seconds=i)
                rows.append((t, t, 0, str(x), "Double",
                             sqlite3.Binary(variant_to_binary(ua.Variant(x, ua.VariantType.Double)))))
            await history._db.executemany(
                f'INSERT INTO "{table}" VALUES (NULL, ?, ?, ?, ?, ?, ?)', rows)
            await history._db.commit()
            await start_node.write_value(ua.Variant(start, ua.VariantType.DateTime))
            await count_node.write_value(ua.Variant(a.preload, ua.VariantType.UInt64))
        print(f"listening on opc.tcp://{host}:{port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for s in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(s, stop.set)
        await stop.wait()
    if tmp:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
