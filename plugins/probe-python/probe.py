"""Weir test fixture: a hostile / curious Python stage. Each message value names a probe; the
answer comes back as a reject reason (so it reaches the reject file), or the probe misbehaves:

  read-file      open /etc/hostname               env        how many environment variables
  read-granted   read /data/hello.txt             env:NAME   the value of NAME
  write-granted  write /data/written.txt          net:PORT   TCP connect to 127.0.0.1:PORT
  loop           spin forever                     bomb       allocate until the memory cap
  trap           raise an exception               anything else passes unchanged
"""

import os
import socket

import weir


def _attempt(what, action):
    try:
        return weir.reject(f"probe: {what} allowed: {action()}")
    except Exception as e:  # noqa: BLE001 - any refusal is the answer
        return weir.reject(f"probe: {what} denied: {type(e).__name__}: {e}")


def _read(path):
    with open(path) as f:
        return f.read().strip()


def _write(path):
    with open(path, "w") as f:
        f.write("from the stage")
    return "wrote"


def _connect(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        s.connect(("127.0.0.1", port))
        return "connected"


@weir.stage
def probe(msg):
    v = (msg.value or b"").decode()
    if v == "read-file":
        return _attempt("file read", lambda: _read("/etc/hostname"))
    if v == "read-granted":
        return _attempt("file read", lambda: _read("/data/hello.txt"))
    if v == "write-granted":
        return _attempt("file write", lambda: _write("/data/written.txt"))
    if v == "env":
        return weir.reject(f"probe: {len(os.environ)} environment variables")
    if v.startswith("env:"):
        return weir.reject(f"probe: {v[4:]}={os.environ.get(v[4:])}")
    if v.startswith("net:"):
        return _attempt("network", lambda: _connect(int(v[4:])))
    if v == "loop":
        while True:
            pass
    if v == "bomb":
        hoard = []
        while True:
            hoard.append(bytearray(1 << 20))
    if v == "trap":
        raise RuntimeError("probe asked to trap")
    return weir.keep()
