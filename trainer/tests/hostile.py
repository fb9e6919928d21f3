#!/usr/bin/env python3
"""hostile.py PORT SECONDS REPORT: strangers at a trainer's rendezvous port (for
test-hostile.sh). Or, with "flood" first, hostile.py flood PORT SECONDS MAX REPORT: see
flood() below. Opens, at once:
  - 40 connections that connect and say nothing (more than the trainer serves at once);
  - 3 slowloris clients trickling a plausible HELLO one byte every 0.5 s;
  - 4 KB of random bytes; a length prefix of 0xffffffff; an HTTP request; a frame of
    40 random bytes;
  - 2 impostors speaking the documented handshake, claiming rank 1, answering the
    challenge with a wrong HMAC (one under a guessed secret, one random).
Keeps them for SECONDS, then writes REPORT (JSON): for each kind, how many connections
the trainer closed on it and whether any impostor got an ACK.
"""
import errno
import hashlib
import hmac
import json
import os
import socket
import struct
import sys
import threading
import time


def flood(port, seconds, most, report):
    """Connects to 127.0.0.1:PORT as fast as one process can, holding the newest 64
    connections open (so that they occupy handshake slots) and sending nothing; closes
    each older one with a reset. Bounded: at most MOST connections in at most SECONDS,
    only ever to 127.0.0.1. Writes REPORT (JSON) with the count when it ends, and also
    every 0.2 s, so that a killed flood still leaves one."""
    held, n, start, last = [], 0, time.time(), 0.0
    linger = struct.pack("ii", 1, 0)
    while n < most and time.time() - start < seconds:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        s.setblocking(False)
        if s.connect_ex(("127.0.0.1", port)) not in (0, errno.EINPROGRESS):
            s.close()
            time.sleep(0.001)
            continue
        n += 1
        held.append(s)
        if len(held) > 64:
            held.pop(0).close()
        if time.time() - last > 0.2:
            last = time.time()
            with open(report + ".tmp", "w") as f:
                json.dump({"connects": n, "seconds": last - start}, f)
            os.replace(report + ".tmp", report)
    with open(report, "w") as f:
        json.dump({"connects": n, "seconds": time.time() - start, "ended": True}, f)


if sys.argv[1] == "flood":
    flood(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    sys.exit(0)

port, seconds, report = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
results = {}
lock = threading.Lock()


def note(kind, key, inc=1):
    with lock:
        results.setdefault(kind, {}).setdefault(key, 0)
        results[kind][key] += inc


def connect():
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.settimeout(seconds)
    return s


def closed_by_server(s, until):
    """Waits (to `until`) for the trainer to close s; True when it did."""
    while time.time() < until:
        s.settimeout(max(0.05, until - time.time()))
        try:
            b = s.recv(4096)
        except socket.timeout:
            return False
        except OSError:
            return True
        if not b:
            return True
    return False


def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def hello(rank):
    sig, ds = b"mlp", b"fashion-mnist"
    return (b"KTH1" + bytes([1]) + os.urandom(32) + struct.pack("<IIQ", 2, rank, 32) +
            struct.pack("<H", len(sig)) + sig + struct.pack("<H", len(ds)) + ds +
            struct.pack("<IBH", 1, 0, 2) + bytes([3]) + struct.pack("<Q", 1))


def run(kind, fn):
    try:
        s = connect()
    except OSError as e:
        note(kind, "connect failed: " + type(e).__name__)
        return
    note(kind, "connected")
    end = time.time() + seconds
    try:
        fn(s, end)
    except OSError:
        note(kind, "closed by trainer")
        return
    if closed_by_server(s, end):
        note(kind, "closed by trainer")
    s.close()


def hold(s, end):
    pass


def trickle(s, end):
    data = frame(hello(1))
    for b in data:
        if time.time() >= end:
            return
        s.sendall(bytes([b]))
        time.sleep(0.5)


def garbage(s, end):
    s.sendall(os.urandom(4096))


def huge(s, end):
    s.sendall(b"\xff\xff\xff\xff" + os.urandom(64))


def junk_frame(s, end):
    s.sendall(frame(os.urandom(40)))


def http(s, end):
    s.sendall(b"GET / HTTP/1.1\r\nHost: trainer\r\n\r\n")


def impostor(key):
    def fn(s, end):
        h = hello(1)
        s.sendall(frame(h))
        n = struct.unpack("<I", recv_exact(s, 4))[0]
        chal = recv_exact(s, n)
        mac = (hmac.new(key, b"client" + h + chal, hashlib.sha256).digest() if key
               else os.urandom(32))
        s.sendall(frame(b"KTH1" + bytes([3]) + mac))
        try:
            r = s.recv(64)
        except OSError:
            r = b""
        if r:
            note("impostor", "got a reply after its proof")
    return fn


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise ConnectionResetError
        b += c
    return b


kinds = ([("hold", hold)] * 40 + [("trickle", trickle)] * 3 +
         [("garbage", garbage), ("huge-length", huge), ("http", http), ("junk-frame", junk_frame),
          ("impostor", impostor(b"guessed")), ("impostor", impostor(None))])
threads = [threading.Thread(target=run, args=k) for k in kinds]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(report, "w") as f:
    json.dump(results, f)
