#!/usr/bin/env python3
"""The floor of any relaying proxy, for scripts/bench-egress: a bare TCP relay on the host, no
policy and no namespace. It listens on a free port of 127.0.0.1 (printed first) and relays each
connection to 127.0.0.1:PORT with splice(2) through 1 MiB pipes, a thread per direction, as
the proxy's relay does.

Usage: relay.py PORT
"""
import fcntl
import os
import socket
import sys
import threading

F_SETPIPE_SZ = 1031
port = int(sys.argv[1])


def one_way(a, b):
    r, w = os.pipe()
    fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
    try:
        while True:
            n = os.splice(a.fileno(), w, 1 << 20, flags=os.SPLICE_F_MOVE)
            if n == 0:
                break
            while n:
                n -= os.splice(r, b.fileno(), n, flags=os.SPLICE_F_MOVE)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    os.close(r)
    os.close(w)


def serve(c):
    s = socket.create_connection(("127.0.0.1", port))
    back = threading.Thread(target=one_way, args=(s, c))
    back.start()
    one_way(c, s)
    back.join()
    c.close()
    s.close()


listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(64)
print(listener.getsockname()[1], flush=True)
while True:
    c, _ = listener.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
