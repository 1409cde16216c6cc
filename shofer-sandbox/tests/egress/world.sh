#!/usr/bin/env bash
# A small world for the --net proxy tests (shofer-sandbox/tests/egress.rs), built inside the
# network and mount namespaces `unshare -n -m` gave this script, so no packet leaves the
# machine whatever the build under test does:
# - this namespace ("the host"): loopback up, a web server on 127.0.0.1:$LOCAL_PORT (a host
#   service the command must not reach), a UDP echo on 127.0.0.1:5353, veth v0 198.51.100.1;
# - a second namespace ("the internet"), reached through the veth: 198.51.100.2 (reg.test,
#   other.test: HTTP on 80, HTTPS on 443 with a certificate for both, SOCKS-reachable),
#   169.254.169.254 (metadata.test) and 10.9.9.9 (private.test), each with HTTP on 80;
# - /etc/hosts replaced (in this mount namespace only) to name them.
# Then runs "$@" (the sandbox) with WORLD set to a directory holding the CA certificate, and
# stops every server it started by its pid.
set -euo pipefail
world=$(mktemp -d /tmp/shofer-egress-world.XXXXXX)
chmod 755 "$world"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$world"
}
trap cleanup EXIT
trap "exit 143" TERM INT HUP
ip link set lo up
py=/usr/bin/python3
# The internet: a process in a network namespace of its own, linked by a veth pair.
unshare -n sleep 1000000 &
inet=$!
pids+=("$inet")
for _ in $(seq 100); do [ "$(readlink /proc/$inet/ns/net)" != "$(readlink /proc/self/ns/net)" ] && break; sleep 0.01; done
ip link add v0 type veth peer name v1 netns "$inet"
ip addr add 198.51.100.1/24 dev v0
ip link set v0 up
in_inet() { nsenter -t "$inet" -n "$@"; }
in_inet ip link set lo up
in_inet ip addr add 198.51.100.2/24 dev v1
in_inet ip link set v1 up
in_inet ip addr add 169.254.169.254/32 dev lo
in_inet ip addr add 10.9.9.9/32 dev lo
in_inet ip route add default dev v1
ip route add 169.254.169.254/32 via 198.51.100.2
ip route add 10.9.9.9/32 via 198.51.100.2
# Certificates: a CA, and a server certificate for reg.test and other.test.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=shofer-test-ca \
  -keyout "$world/ca.key" -out "$world/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=reg.test -keyout "$world/srv.key" \
  -out "$world/srv.csr" 2>/dev/null
printf 'subjectAltName=DNS:reg.test,DNS:other.test\n' > "$world/ext"
openssl x509 -req -in "$world/srv.csr" -CA "$world/ca.pem" -CAkey "$world/ca.key" \
  -CAcreateserial -days 2 -extfile "$world/ext" -out "$world/srv.pem" 2>/dev/null
chmod 644 "$world"/*.pem
mkdir -p "$world/www"
echo "hello from reg.test" > "$world/www/index.txt"
echo "host service" > "$world/www/local.txt"
# A repository served over (dumb) HTTP on reg.test:8080.
git init -q "$world/src"
git -C "$world/src" -c user.name=t -c user.email=t@t commit -q --allow-empty -m "served through the proxy"
git clone -q --bare "$world/src" "$world/www/repo.git"
git -C "$world/www/repo.git" update-server-info
# The same repository over smart HTTP (git http-backend as CGI) behind TLS on reg.test:9443.
mkdir -p "$world/smart/cgi-bin"
printf '#!/bin/sh\nGIT_PROJECT_ROOT=%s GIT_HTTP_EXPORT_ALL=1 GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0=* exec git http-backend\n' "$world/www" \
  > "$world/smart/cgi-bin/git"
chmod 755 "$world/smart/cgi-bin/git"
# A package index (PEP 503) with one wheel, on reg.test:8080/simple/.
mkdir -p "$world/www/simple/shoferdemo"
$py - "$world/www" <<'PY'
import base64, hashlib, sys, zipfile
www = sys.argv[1]
name = "shoferdemo-0.1-py3-none-any.whl"
files = {
    "shoferdemo/__init__.py": b"VALUE = 'through the proxy'\n",
    "shoferdemo-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: shoferdemo\nVersion: 0.1\n",
    "shoferdemo-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: shofer-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = ""
for path, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record += f"{path},sha256={digest},{len(data)}\n"
record += "shoferdemo-0.1.dist-info/RECORD,,\n"
with zipfile.ZipFile(f"{www}/simple/shoferdemo/{name}", "w") as z:
    for path, data in files.items():
        z.writestr(path, data)
    z.writestr("shoferdemo-0.1.dist-info/RECORD", record)
open(f"{www}/simple/shoferdemo/index.html", "w").write(f'<a href="{name}">{name}</a>\n')
open(f"{www}/simple/index.html", "w").write('<a href="shoferdemo/">shoferdemo</a>\n')
PY
# Servers: each answers with its own name, so a test sees who it reached.
cat > "$world/serve.py" <<'PY'
import http.server, ssl, sys, socketserver
addr, port, body = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
tls = len(sys.argv) > 4
if body == b"cgi":
    # git http-backend as CGI, from the directory holding cgi-bin/.
    import functools, os
    os.chdir(sys.argv[6])
    H = http.server.CGIHTTPRequestHandler
    # Through self.wfile (TLS), not a forked child writing to the raw socket.
    H.have_fork = False
    H.log_message = lambda *a: None
else:
    H = None
class Fixed(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body) + 1))
        self.end_headers()
        self.wfile.write(body + b"\n")
    def log_message(self, *a):
        pass
H = H or Fixed
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    def shutdown_request(self, request):
        # TLS ends with close_notify (a body that ends at the close needs it).
        try:
            request.settimeout(2)
            request.unwrap()
        except Exception:
            pass
        super().shutdown_request(request)
s = S((addr, port), H)
if tls:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[4], sys.argv[5])
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
s.serve_forever()
PY
nsenter -t "$inet" -n $py "$world/serve.py" 198.51.100.2 80 reg-http & pids+=($!)
nsenter -t "$inet" -n $py "$world/serve.py" 198.51.100.2 443 reg-https "$world/srv.pem" "$world/srv.key" & pids+=($!)
nsenter -t "$inet" -n $py "$world/serve.py" 198.51.100.2 8443 reg-8443 & pids+=($!)
nsenter -t "$inet" -n $py -m http.server 8080 --bind 198.51.100.2 --directory "$world/www" >/dev/null 2>&1 & pids+=($!)
nsenter -t "$inet" -n $py "$world/serve.py" 198.51.100.2 9443 cgi "$world/srv.pem" "$world/srv.key" "$world/smart" & pids+=($!)
nsenter -t "$inet" -n $py "$world/serve.py" 169.254.169.254 80 metadata-secret & pids+=($!)
nsenter -t "$inet" -n $py "$world/serve.py" 10.9.9.9 80 private-secret & pids+=($!)
$py "$world/serve.py" 127.0.0.1 "${LOCAL_PORT:-8765}" host-local-secret & pids+=($!)
$py -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 5353))
while True:
    d, a = s.recvfrom(2048)
    s.sendto(b"udp-echo:" + d, a)
' & pids+=($!)
cat > "$world/hosts" <<HOSTS
127.0.0.1 localhost
198.51.100.2 reg.test other.test
169.254.169.254 metadata.test
10.9.9.9 private.test
127.0.0.1 local.test
HOSTS
chmod 644 "$world/hosts"
mount --bind "$world/hosts" /etc/hosts
# Every server listening before the sandbox starts.
for _ in $(seq 200); do
  n=$( (ss -Hltn; in_inet ss -Hltn) 2>/dev/null | grep -c LISTEN || true)
  [ "$n" -ge 8 ] && break
  sleep 0.05
done
WORLD=$world "$@"
