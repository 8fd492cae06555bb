#!/usr/bin/env python3
"""Stands in for the `uaring` binary in the interop tests (UARING_BIN) and records what the
clients send: runs the real binary (UARING_TAP_REAL_BIN) with the same arguments, puts a TCP
proxy in front of its listening port, announces the proxy's URL instead, and writes each
connection's client-to-server bytes to UARING_TAP_DIR/rec-<pid>-<n>.bin.
Used by scripts/record-corpus.sh (the fuzz seed corpus, docs/Fuzzing.md)."""
import os
import signal
import socket
import subprocess
import sys
import threading

real = os.environ["UARING_TAP_REAL_BIN"]
out_dir = os.environ["UARING_TAP_DIR"]
child = subprocess.Popen([real, *sys.argv[1:]], stdout=subprocess.PIPE, text=True)
signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
signal.signal(signal.SIGINT, lambda *_: child.send_signal(signal.SIGINT))
count = 0
lock = threading.Lock()


def pump(src, dst, record):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if record is not None:
                record.write(data)
                record.flush()
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def proxy(listener, port):
    global count
    while True:
        client, _ = listener.accept()
        server = socket.create_connection(("127.0.0.1", port))
        with lock:
            count += 1
            n = count
        record = open(os.path.join(out_dir, f"rec-{os.getpid()}-{n}.bin"), "wb")
        threading.Thread(target=pump, args=(client, server, record), daemon=True).start()
        threading.Thread(target=pump, args=(server, client, None), daemon=True).start()


for line in child.stdout:
    if line.startswith("listening on "):
        url = line.split("listening on ", 1)[1].strip()
        port = int(url.rsplit(":", 1)[1])
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        threading.Thread(target=proxy, args=(listener, port), daemon=True).start()
        line = f"listening on {url.rsplit(':', 1)[0]}:{listener.getsockname()[1]}\n"
    sys.stdout.write(line)
    sys.stdout.flush()
sys.exit(child.wait())
