#!/usr/bin/env python3
"""A client for scripts/bench-egress: N HTTP GETs of URL (http://127.0.0.1:PORT/PATH), each on
a new connection, directly or through the HTTP proxy PROXY (absolute-URI form), reading every
byte. Prints `inner-us N`: the time of the GETs alone (interleave.py keeps it).

Usage: fetch.py URL N [PROXY_HOST:PORT | env]   (env: the proxy of `$http_proxy`)
"""
import os
import socket
import sys
import time

url, n = sys.argv[1], int(sys.argv[2])
proxy = sys.argv[3] if len(sys.argv) > 3 else None
if proxy == "env":
    proxy = os.environ["http_proxy"].split("//", 1)[-1].rstrip("/")
hostport = url.split("/")[2]
path = "/" + url.split("/", 3)[3]
host, port = hostport.rsplit(":", 1)
target = proxy.rsplit(":", 1) if proxy else (host, port)
buf = bytearray(1 << 20)
t0 = time.perf_counter()
for _ in range(n):
    s = socket.create_connection((target[0], int(target[1])))
    line = url if proxy else path
    s.sendall(b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (line.encode(), hostport.encode()))
    total = 0
    while True:
        got = s.recv_into(buf)
        if not got:
            break
        total += got
    s.close()
    assert total > 0
print("inner-us %d" % ((time.perf_counter() - t0) * 1e6))
