#!/bin/sh
# Run inside the sandbox by shofer-sandbox/tests/egress.rs, in the world of world.sh: one
# line per check, "ok NAME" or "FAIL NAME: what happened".
ca="$WORLD/ca.pem"
py=/usr/bin/python3
# The proxy's port, from the variables the sandbox set (3128 in a network namespace of the
# command's own, a port of the kernel's choosing on the host's loopback on Landlock alone).
port=${http_proxy##*:}
export PROXY_PORT="$port"
say() { if [ "$2" = "$3" ]; then echo "ok $1"; else echo "FAIL $1: got '$2', expected '$3'"; fi; }
# The slow client first, in the background: the proxy must close it within its head time.
loris_out=$(mktemp)
$py - > "$loris_out" 2>&1 <<'PY' &
import os, socket, time
s = socket.create_connection(("127.0.0.1", int(os.environ["PROXY_PORT"])))
s.sendall(b"CONNECT reg.test:443 HTTP/1.1\r\n")
s.settimeout(30)
t = time.time()
try:
    got = s.recv(100)
except Exception as e:
    got = repr(e).encode()
print("closed" if (got == b"" or b"408" in got) and time.time() - t < 25 else "open %r" % got)
PY
loris=$!
say http "$(curl -sS -m 10 http://reg.test/ 2>&1)" reg-http
say connect-tls "$(curl -sS -m 10 --cacert "$ca" https://reg.test/ 2>&1)" reg-https
say socks5-hostname "$(curl -sS -m 10 -x socks5h://127.0.0.1:$port --cacert "$ca" https://reg.test/ 2>&1)" reg-https
clone=$(mktemp -d)
say git-clone-http "$(git clone -q http://reg.test:8080/repo.git "$clone/r" 2>&1 && git -C "$clone/r" log --format=%s)" "served through the proxy"
say git-clone-smart-https "$(GIT_SSL_CAINFO="$ca" git clone -q https://reg.test:9443/cgi-bin/git/repo.git "$clone/s" 2>&1 && git -C "$clone/s" log --format=%s)" "served through the proxy"
pipdir=$(mktemp -d)
out=$($py -m pip download --no-deps --no-cache-dir --disable-pip-version-check -q --index-url http://reg.test:8080/simple/ --trusted-host reg.test -d "$pipdir" shoferdemo 2>&1)
say pip-local-index "$(ls "$pipdir")" "shoferdemo-0.1-py3-none-any.whl"
[ -n "$out" ] && echo "pip said: $out"
say named-address "$(curl -sS -m 10 http://private.test/ 2>&1)" private-secret
code() { curl -s -m 10 -o /dev/null -w '%{http_code}' "$@"; }
say unlisted-name "$(code http://unlisted.test/)" 403
say ip-literal "$(code http://198.51.100.2/)" 403
say resolves-to-loopback "$(code http://local.test:8765/local.txt)" 403
say resolves-to-metadata "$(code http://metadata.test/)" 403
say unlisted-port "$(curl -s -m 10 -o /dev/null -w '%{http_connect}' --cacert "$ca" https://reg.test:8443/)" 403
say host-header "$(code -H 'Host: other.test' http://reg.test/)" 400
out=$(curl -sS -m 10 --cacert "$ca" --connect-to other.test:443:reg.test:443 https://other.test/ 2>&1)
case "$out" in *reg-https*) echo "FAIL sni: reached it: $out" ;; *) echo "ok sni" ;; esac
say socks5-refused "$(curl -s -m 10 -x socks5h://127.0.0.1:$port http://unlisted.test/ >/dev/null 2>&1; echo $?)" 97
# No way out but the proxy.
$py - <<'PY'
import socket
def udp(name, addr):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(1)
        s.sendto(b"x", addr)
        print("FAIL %s: answered %r" % (name, s.recv(100)))
    except OSError:
        print("ok " + name)
udp("udp-host-loopback", ("127.0.0.1", 5353))
udp("dns-out", ("198.51.100.1", 53))
udp("udp-out", ("198.51.100.2", 80))
def tcp(name, addr):
    try:
        socket.create_connection(addr, timeout=2)
        print("FAIL %s: connected" % name)
    except OSError:
        print("ok " + name)
tcp("tcp-direct", ("198.51.100.2", 80))
tcp("tcp-host-loopback", ("127.0.0.1", 8765))
tcp("tcp-metadata-direct", ("169.254.169.254", 80))
try:
    r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    r.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", ("198.51.100.2", 0))
    r.settimeout(1)
    print("FAIL raw: answered %r" % r.recv(100))
except OSError:
    print("ok raw")
PY
wait $loris
say slow-loris "$(cat "$loris_out")" closed
# A tunnel to a name carries TLS naming it: plain bytes through CONNECT are refused.
out=$($py - <<'PY'
import os, socket
s = socket.create_connection(("127.0.0.1", int(os.environ["PROXY_PORT"])))
s.sendall(b"CONNECT reg.test:80 HTTP/1.1\r\nHost: reg.test:80\r\n\r\n")
s.settimeout(15)
head = s.recv(200)
s.sendall(b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
try:
    got = s.recv(200)
except Exception as e:
    got = repr(e).encode()
print("reached" if b"reg-http" in got else "refused")
PY
)
say plain-tunnel "$out" refused
say proxy-variables "$http_proxy $HTTPS_PROXY $NODE_USE_ENV_PROXY" "http://127.0.0.1:${EXPECT_PROXY_PORT:-$port} http://127.0.0.1:${EXPECT_PROXY_PORT:-$port} 1"
# Landlock alone keeps the host's network namespace: the gate's own checks.
if [ "${LANDLOCK_CHECKS:-}" = 1 ]; then $py "$(dirname "$0")/landlock.py"; fi
