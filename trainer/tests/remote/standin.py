"""A stand-in HTTP server for test-remote-data.sh: the failures a real object store does
not produce on demand (SeaweedFS answers every request it can). It serves the files of
DIR by path (percent-decoded; a query string is ignored, as a presigned URL's is by the
test), honouring Range, and fails on purpose by the path's first part:
    /files/NAME       the file (206 with Content-Range for a range)
    /reset-once/NAME  the first request: half the body, then a TCP reset; then the file
    /reset/NAME       every request: half the body, then a TCP reset
    /slow/NAME        the headers and 16 bytes, then nothing for 60 s
    /503/NAME         503 Service Unavailable
    /failing/NAME     the file while DIR/failing does not exist, then 503 Service
                      Unavailable: a server that starts failing under a running job
Usage: standin.py DIR PORTFILE (it writes the port it listens on to PORTFILE)."""
import http.server
import os
import re
import socket
import struct
import sys
import time
import urllib.parse

ROOT, PORTFILE = sys.argv[1:3]
seen = set()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        parts = self.path.split("?", 1)[0].split("/", 2)
        mode, name = (parts[1], parts[2]) if len(parts) == 3 else ("", "")
        path = os.path.join(ROOT, os.path.basename(urllib.parse.unquote(name)))
        failing = mode == "failing" and os.path.exists(os.path.join(ROOT, "failing"))
        if mode == "503" or failing or not os.path.isfile(path):
            self.send_response(503 if mode == "503" or failing else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = open(path, "rb").read()
        first = mode in ("reset", "slow") or (mode == "reset-once" and self.path not in seen)
        seen.add(self.path)
        m = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        lo, hi = 0, len(data) - 1
        if m and not first:
            lo, hi = int(m.group(1)), min(int(m.group(2) or hi), hi)
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (lo, hi, len(data)))
        else:
            self.send_response(200)
        body = data[lo:hi + 1]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not first:
            self.wfile.write(body)
        elif mode == "slow":
            self.wfile.write(body[:16])
            self.wfile.flush()
            time.sleep(60)
        else:
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            # A reset discards what the client has not read yet: let it read the half.
            time.sleep(0.5)
            # SO_LINGER 0: close sends a reset, as a dropped connection does.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
with open(PORTFILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORTFILE + ".tmp", PORTFILE)
server.serve_forever()
