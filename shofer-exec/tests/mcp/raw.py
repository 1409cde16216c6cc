#!/usr/bin/env python3
"""A raw JSON-RPC driver for `shofer serve`: writes malformed bytes on its stdin and checks that
every request with a readable id gets a JSON-RPC 2.0 error response (-32700 parse error,
-32600 invalid request, -32602 invalid params), that the server keeps serving, and that it
exits 0 when stdin closes.

Usage: raw.py SHOFER_BINARY SCRATCH_DIR   (plain python3, no packages)
"""

import json
import os
import select
import subprocess
import sys
import time

SHOFER, SCRATCH = sys.argv[1], sys.argv[2]
failures = []


def check(cond, what):
    print(f"{'ok  ' if cond else 'FAIL'} {what}", flush=True)
    if not cond:
        failures.append(what)


proc = subprocess.Popen([SHOFER, "serve", "--cwd", SCRATCH], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=open(os.path.join(SCRATCH, "raw.log"), "wb"), env=dict(os.environ, TMPDIR=SCRATCH))


def send(data):
    proc.stdin.write(data + b"\n")
    proc.stdin.flush()


def recv(limit=10.0):
    r, _, _ = select.select([proc.stdout], [], [], limit)
    if not r:
        return None
    line = proc.stdout.readline()
    return json.loads(line) if line else None


def call(name, args):
    return {"name": name, "arguments": args}


def req(id_, method, params=None):
    m = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        m["params"] = params
    return json.dumps(m).encode()


send(req(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "raw", "version": "1"}}))
init = recv()
check(init is not None and init.get("id") == 0 and "result" in init, "initialize answered")
send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

exec_prefix = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"execute_command","arguments":{"command":'
cases = [
    ("invalid UTF-8", exec_prefix % 1 + b'"echo \xff\xfe","cwd":null,"timeout":null}}}', 1, -32700),
    ("a lone surrogate", exec_prefix % 2 + b'"echo \\ud800","cwd":null,"timeout":null}}}', 2, -32700),
    ("1e400", exec_prefix % 3 + b'"echo","cwd":null,"timeout":1e400}}}', 3, -32700),
    ("deep nesting", exec_prefix % 4 + b"[" * 100000 + b"]" * 100000 + b"}}}", 4, -32700),
    ("truncated JSON", b'{"jsonrpc":"2.0","id":"five","method":"tools/list"', "five", -32700),
    ("not JSON", b"hello", None, -32700),
    ("a batch", b"[" + req(6, "tools/list") + b"]", None, -32600),
    ("no method", b'{"jsonrpc":"2.0","id":7}', 7, -32600),
    ("a numeric method", b'{"jsonrpc":"2.0","id":8,"method":8}', 8, -32600),
    ("params not an object", b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":7}', 9, -32602),
    ("tools/call without a name", b'{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"arguments":{}}}', 10, -32602),
    ("a line over 16 MiB", exec_prefix % 11 + b'"echo ' + b"a" * (17 << 20) + b'"}}}', 11, -32600),
]
for what, line, id_, code in cases:
    t0 = time.monotonic()
    send(line)
    r = recv()
    took = time.monotonic() - t0
    check(r is not None and r.get("jsonrpc") == "2.0" and r.get("id") == id_
          and r.get("error", {}).get("code") == code,
          f"{what}: answered with {code} and id {id_!r} in {took:.2f}s ({json.dumps(r)[:160] if r else None})")

send(req(12, "tools/call", call("execute_command", {"command": "echo still-serving", "cwd": None, "timeout": None})))
r = recv()
check(r is not None and r.get("id") == 12 and "still-serving" in json.dumps(r), "the server keeps serving")
proc.stdin.close()
try:
    rc = proc.wait(10)
except subprocess.TimeoutExpired:
    proc.kill()
    rc = None
check(rc == 0, f"stdin closed: the server exits 0 ({rc})")
print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
