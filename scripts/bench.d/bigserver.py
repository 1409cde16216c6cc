#!/usr/bin/env python3
"""A local HTTP server for scripts/bench-egress: every GET is answered with SIZE bytes of a
sparse file, sent with sendfile(2), then the connection closes. Prints its port.

Usage: bigserver.py SIZE_BYTES FILE
"""
import os
import socket
import sys
import threading

size, path = int(sys.argv[1]), sys.argv[2]
with open(path, "wb") as f:
    f.truncate(size)
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(128)
print(srv.getsockname()[1], flush=True)


def serve(conn):
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            got = conn.recv(4096)
            if not got:
                return
            data += got
        want = size if data.split(b" ", 2)[1].endswith(b"/big") else 1
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % want)
        with open(path, "rb") as f:
            sent = 0
            while sent < want:
                n = os.sendfile(conn.fileno(), f.fileno(), sent, want - sent)
                if n == 0:
                    break
                sent += n


while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
