# Run inside the sandbox by checks.sh on --backend landlock with --net proxy, in the world of
# world.sh (the command shares that network namespace: 127.0.0.1:8765 is a host service the
# run did not start; 198.51.100.2 is "the internet"). One "ok NAME" / "FAIL NAME: ..." line
# per check.
import ctypes, errno, os, socket, struct, threading

PROXY = ("127.0.0.1", int(os.environ["PROXY_PORT"]))
OUT = ("198.51.100.2", 80)


def say(name, ok, what=""):
    print(("ok " + name) if ok else "FAIL %s: %s" % (name, what))


def refused(f):
    try:
        f()
        return "succeeded"
    except OSError as e:
        return e.errno


# A host loopback service this run did not start, and "the internet", direct.
say("ll-host-service", refused(lambda: socket.create_connection(("127.0.0.1", 8765), 2)) == errno.EACCES, "not EACCES")
say("ll-direct-out", refused(lambda: socket.create_connection(OUT, 2)) == errno.EACCES, "not EACCES")
say("ll-ipv6-mapped", refused(lambda: socket.create_connection(("::ffff:198.51.100.2", 80), 2)) == errno.EACCES, "not EACCES")
# Datagram and MPTCP sockets are never made.
say("ll-udp", refused(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) == errno.EACCES, "udp socket made")
say("ll-mptcp", refused(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)) == errno.EPROTONOSUPPORT, "mptcp socket made")
# TCP Fast Open: data with the SYN, without connect().
MSG_FASTOPEN = 0x20000000


def tfo_send():
    s = socket.socket()
    s.sendto(b"GET / HTTP/1.0\r\n\r\n", MSG_FASTOPEN, OUT)


def tfo_connect():
    s = socket.socket()
    s.setsockopt(socket.IPPROTO_TCP, 30, 1)  # TCP_FASTOPEN_CONNECT


say("ll-msg-fastopen", refused(tfo_send) == errno.EACCES, "sendto MSG_FASTOPEN not refused")
say("ll-fastopen-connect", refused(tfo_connect) == errno.EACCES, "TCP_FASTOPEN_CONNECT not refused")
# A server of the run's own, on loopback: reachable; beyond loopback: not bound at all.
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(4)
c = socket.create_connection(srv.getsockname(), 2)
a, _ = srv.accept()
c.sendall(b"own")
say("ll-own-server", a.recv(3) == b"own", "no data")
for s in (c, a):
    s.close()
srv6 = socket.socket(socket.AF_INET6)
srv6.bind(("::1", 0))
srv6.listen(1)
say("ll-own-server-v6", refused(lambda: socket.create_connection(srv6.getsockname()[:2], 2).close()) == "succeeded", "refused")
say("ll-bind-any", refused(lambda: socket.socket().bind(("0.0.0.0", 0))) == errno.EACCES, "bound every interface")
say("ll-listen-unbound", refused(lambda: socket.socket().listen(1)) == errno.EACCES, "listened on a port of every interface")
# The unspecified address goes where the socket's own address says: a listener of the run's
# on [::1]:8765 or 127.0.0.2:8765 must not admit a connect to :: or 0.0.0.0 from a socket
# bound to 127.0.0.1, which the kernel would send to the host's 127.0.0.1:8765.
def unspecified(family, own, source, dest):
    l = socket.socket(family)
    l.bind((own, 8765))
    l.listen(1)
    try:
        c = socket.socket(family)
        c.bind((source, 0))
        c.settimeout(2)
        c.connect((dest, 8765))
        c.sendall(b"GET / HTTP/1.0\r\n\r\n")
        return "reached: %r" % c.recv(64)
    except OSError as e:
        return e.errno
    finally:
        l.close()


say("ll-unspecified-v6", unspecified(socket.AF_INET6, "::1", "::ffff:127.0.0.1", "::") == errno.EACCES, "not EACCES")
say("ll-unspecified-v4", unspecified(socket.AF_INET, "127.0.0.2", "127.0.0.1", "0.0.0.0") == errno.EACCES, "not EACCES")


# SO_REUSEPORT would let the run's listener join a host service's group on the same port:
# the gate binds without it, and refuses to listen once it is set again.
def reuseport():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", 0))
    if s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT):
        return "bound with SO_REUSEPORT"
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.listen(1)


say("ll-reuseport", refused(reuseport) == errno.EACCES, "not refused")
# A port the run's server gave up is not the run's any more.
port = srv.getsockname()[1]
srv.close()
say("ll-closed-server", refused(lambda: socket.create_connection(("127.0.0.1", port), 2)) in (errno.EACCES, errno.ECONNREFUSED), "connected")
# The address rewritten by a second thread while connect is trapped never reaches "out".
libc = ctypes.CDLL(None, use_errno=True)


def sockaddr(host, port):
    return struct.pack("=H", socket.AF_INET) + struct.pack("!H", port) + socket.inet_aton(host) + b"\0" * 8


good, bad = sockaddr(*PROXY), sockaddr(*OUT)
buf = ctypes.create_string_buffer(good, 16)
stop = threading.Event()


def flip():
    while not stop.is_set():
        ctypes.memmove(buf, bad, 16)
        ctypes.memmove(buf, good, 16)


t = threading.Thread(target=flip)
t.start()
reached, proxied, denied = [], 0, 0
for _ in range(200):
    s = socket.socket()  # blocking: a timeout would make connect return EINPROGRESS
    if libc.connect(s.fileno(), buf, 16) == 0:
        peer = s.getpeername()
        if peer == PROXY:
            proxied += 1
        else:
            reached.append(peer)
    elif ctypes.get_errno() == errno.EACCES:
        denied += 1
    s.close()
stop.set()
t.join()
# Both addresses were seen (some connects reached the proxy, some were refused), and no
# connect went anywhere else.
say("ll-race", not reached and proxied > 0 and denied > 0, "reached %r, %d to the proxy, %d refused" % (reached[:3], proxied, denied))
