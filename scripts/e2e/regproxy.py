#!/usr/bin/env python3
"""A registry in front of benchtool registries, for the e2e rows that need a
tag whose digest changes and a pull that takes long.

usage: regproxy.py HOST STATE-FILE RATE UPSTREAM...

Listens on HOST at a port the OS picks and prints "HOST:PORT". Every
UPSTREAM (HOST:PORT) is a benchtool registry serving bench/disk.

  /v2/golden/disk/...  bench/disk of the upstream named in STATE-FILE (read
                       at each request): the tag "latest" is its "qcow2";
                       a manifest or blob by digest is looked for in every
                       upstream, that one first. Writing another upstream
                       into STATE-FILE is pushing a new image to the tag.
  /v2/slow/NAME/...    bench/disk of the first upstream, its blobs sent at
                       RATE bytes/s (a containerdisk the kubelet pulls
                       slowly); NAME is free, so each run pulls anew.
"""
import http.client
import http.server
import sys
import time

host, state_file, rate, upstreams = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authenticate", "proxy-authorization"}


def route(path):
    """(path upstream-side, candidate upstreams, bytes/s or 0) or None."""
    parts = path.split("/")  # "", "v2", repo..., kind, ref
    if len(parts) < 6 or parts[1] != "v2":
        return None
    if parts[2] == "golden" and parts[3] == "disk":
        with open(state_file) as f:
            current = f.read().strip()
        ref = "qcow2" if parts[5] == "latest" else parts[5]
        order = [current] + [u for u in upstreams if u != current]
        return "/v2/bench/disk/%s/%s" % (parts[4], ref), order, 0
    if parts[2] == "slow":
        return "/v2/bench/disk/%s/%s" % (parts[4], "/".join(parts[5:])), upstreams[:1], rate if parts[4] == "blobs" else 0
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (time.strftime("%H:%M:%S"), fmt % args))

    def do_HEAD(self):
        self.forward()

    def do_GET(self):
        self.forward()

    def forward(self):
        try:
            self.proxy()
        except (OSError, http.client.HTTPException) as e:
            self.log_message("%s %s: %s", self.command, self.path, e)
            try:
                self.send_error(502, str(e))
            except OSError:
                pass

    def proxy(self):
        if self.path.rstrip("/") == "/v2":
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(b"{}")
            return
        r = route(self.path.split("?")[0])
        if r is None:
            self.send_error(404)
            return
        path, order, bps = r
        for i, up in enumerate(order):
            conn = http.client.HTTPConnection(up, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP and k.lower() != "host"}
            conn.request(self.command, path, headers=headers)
            resp = conn.getresponse()
            if resp.status == 404 and i < len(order) - 1:
                resp.read()
                conn.close()
                continue
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in HOP:
                    self.send_header(k, v)
            self.end_headers()
            if self.command == "GET":
                start, sent = time.monotonic(), 0
                while chunk := resp.read(64 << 10):
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    if bps:
                        time.sleep(max(0.0, start + sent / bps - time.monotonic()))
            conn.close()
            return


srv = http.server.ThreadingHTTPServer((host, 0), Handler)
print("%s:%d" % (host, srv.server_address[1]), flush=True)
srv.serve_forever()
