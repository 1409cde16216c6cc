#!/usr/bin/env python3
"""`shofer serve` under load, faults and hostile input, through the official MCP Python SDK.

Usage: limits.py CASE SHOFER_BINARY SCRATCH_DIR [WORKTREE_DIR]

Cases (each one server session; see shofer-exec/tests/serve_limits.rs):
  load      2,000 sequential execute_command calls under `ulimit -n 256`: every call answers,
            the server's descriptors and RSS at the end are back near their level after the
            first calls, and list_commands keeps at most the documented number of records.
  plants    --worktree: the default artifact directory is private (0700, not under /tmp) and a
            sandboxed command cannot plant anything in it; with a user-named directory in /tmp
            the reader refuses a planted symlink, FIFO and hard link with a clear message.
  search    a cancelled search stops burning the server's CPU; catastrophic patterns answer.
  huge      a command over the kernel's argument limit with a .shofer/shoferignore present:
            refused at once, RSS stays low, a concurrent call answers quickly.
  shutdown  1,000 background commands (half ignoring SIGTERM): gone within 1 s of stdin closing.
  runaway   a background writer (`yes &`, a shell loop `&`, `yes` past a soft timeout) at the
            artifact cap is throttled: it and the server use next to no CPU; the next result
            names the command and terminate_command, which stops it.

Prints `ok`/`FAIL` lines and exits 0 when every check passed.
"""

import asyncio
import json
import os
import re
import stat
import sys
import threading
import time
import uuid

import anyio

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

CASE, SHOFER, SCRATCH = sys.argv[1], sys.argv[2], sys.argv[3]
WORKTREE = sys.argv[4] if len(sys.argv) > 4 else None
# XDG_STATE_HOME: a --worktree server's own artifact directory goes there (not to $HOME).
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
       "XDG_STATE_HOME": os.path.join(SCRATCH, "state-home")}

failures = []


def check(cond, what):
    print(f"{'ok  ' if cond else 'FAIL'} {what}", flush=True)
    if not cond:
        failures.append(what)


def text_of(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def call(session, name, args=None):
    result = await session.call_tool(name, args or {})
    return result, text_of(result)


async def run(session, command, timeout=None):
    return await call(session, "execute_command", {"command": command, "cwd": None, "timeout": timeout})


def procs_with(marker):
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmd and state != "Z":
            found.append(int(d))
    return found


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


async def server_pid(session):
    r, t = await run(session, "echo $PPID")
    m = re.search(r"^(\d+)$", t, re.M)
    return int(m.group(1)) if m else None


def server(args, errlog_name, shell_prefix=None, env=None):
    argv = ["serve", *args]
    if shell_prefix:
        quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in [SHOFER, *argv])
        params = StdioServerParameters(command="/bin/sh", args=["-c", f"{shell_prefix}; exec {quoted}"], env=env or ENV)
    else:
        params = StdioServerParameters(command=SHOFER, args=argv, env=env or ENV)
    return params, open(os.path.join(SCRATCH, errlog_name), "w")


async def case_load():
    task = os.path.join(SCRATCH, "task")
    os.makedirs(task, exist_ok=True)
    params, errlog = server(["--cwd", task, "--preview", "small"], "load.log", shell_prefix="ulimit -n 256")
    calls, failed = 2000, []
    with errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                pid = await server_pid(session)
                check(pid is not None and open(f"/proc/{pid}/limits").read().find("Max open files            256") >= 0,
                      f"server {pid} runs under ulimit -n 256")
                base_fds = base_rss = None
                t0 = time.monotonic()
                for i in range(calls):
                    # Every 50th call spills to an artifact (another descriptor while it runs).
                    cmd = f"seq 1 2000; echo call-{i}" if i % 50 == 0 else f"echo call-{i}"
                    r, t = await run(session, cmd)
                    if r.is_error or f"call-{i}" not in t:
                        failed.append((i, t[:200]))
                    if i == 99:
                        base_fds, base_rss = fd_count(pid), status_kb(pid, "VmRSS")
                took = time.monotonic() - t0
                # The last command's pipes close as its reaping finishes, just after its
                # answer: give that a moment (under load it can lag the reply).
                for _ in range(100):
                    if fd_count(pid) <= base_fds + 2:
                        break
                    await asyncio.sleep(0.03)
                end_fds, end_rss = fd_count(pid), status_kb(pid, "VmRSS")
                threads = status_kb(pid, "Threads")
                check(failed == [], f"all {calls} calls answered with their output ({len(failed)} failed, first {failed[:1]})")
                print(f"note {calls} calls in {took:.1f}s ({calls / took:.0f}/s); fds {base_fds} -> {end_fds}; "
                      f"RSS {base_rss} -> {end_rss} kB; threads {threads}")
                check(end_fds <= base_fds + 2, f"descriptors back to their level: {base_fds} after 100 calls, {end_fds} after {calls}")
                # 1,900 more calls may add at most the capped, compact records (~1 kB each here).
                check(end_rss - base_rss < 4096, f"RSS bounded: {base_rss} kB after 100 calls, {end_rss} kB after {calls}")
                r, t = await call(session, "list_commands")
                n = len(json.loads(t)["commands"])
                check(1000 <= n <= 1010, f"list_commands keeps the latest 1,000 finished commands ({n})")
                arts = re.findall(r"cmd-\d+\.txt", t)
                first = None
                r, t = await run(session, "seq 1 3000")
                m = re.search(r"Artifact ID: (cmd-\d+\.txt)", t)
                first = m.group(1) if m else None
                r, t = await call(session, "read_command_output", {"artifact_id": first, "search": "^2999$"})
                check("Total matches: 1" in t, f"artifacts still readable after the cap ({t[:120]!r})")


async def case_plants():
    home = os.environ.get("HOME", "/root")
    state = os.path.join(SCRATCH, "state")  # the test makes SCRATCH outside /tmp (under $HOME)
    env = dict(ENV, XDG_STATE_HOME=state)
    env.pop("XDG_RUNTIME_DIR", None)
    victim = os.path.join(SCRATCH, "victim.txt")
    with open(victim, "w") as f:
        f.write("secret line\n" * 10)
    params, errlog = server(["--worktree", WORKTREE, "--preview", "small"], "plants.log", env=env)
    with errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                r, t = await run(session, "seq 1 3000")
                m = re.search(r"Artifact ID: (cmd-\d+\.txt)", t)
                art = m.group(1) if m else None
                with open(os.path.join(SCRATCH, "plants.log")) as f:
                    d = re.search(r"artifacts in (\S+)", f.read())
                arts = d.group(1) if d else None
                check(arts is not None and arts.startswith(state + "/shofer/serve/shofer-serve-")
                      and not arts.startswith("/tmp/"), f"--worktree: artifacts in a private state directory ({arts})")
                mode = stat.S_IMODE(os.stat(arts).st_mode) if arts else None
                check(mode == 0o700, f"the artifact directory is 0700 ({oct(mode or 0)})")
                plant = (f"ln -s {victim} {arts}/cmd-11.txt; mkfifo {arts}/cmd-12.txt; ln {victim} {arts}/cmd-13.txt; "
                         f"rm -f {arts}/{art}; echo x > {arts}/cmd-14.txt; ls {arts}")
                r, t = await run(session, plant)
                # The plant command's own artifact (a slow run under load spills its output)
                # is the server's, not a plant.
                own = set(re.findall(r"(?:Artifact ID: |is in artifact )(cmd-\d+\.txt)", t))
                left = sorted(set(os.listdir(arts)) - own - {"owner"})  # the server's owner record
                check(left == [art], f"a sandboxed command cannot plant in it ({os.listdir(arts)}; {t[-300:]!r})")
                r, t = await call(session, "read_command_output", {"artifact_id": art, "search": "^2999$"})
                check("Total matches: 1" in t, "its own artifact still reads")

    # A user-named directory in /tmp (writable by the sandbox): the plants land, the reader
    # refuses each.
    arts = os.path.join(SCRATCH, "tmp-arts")
    tmp_arts = f"/tmp/shofer-plants-{uuid.uuid4().hex[:10]}"
    os.makedirs(tmp_arts, mode=0o700)
    tmp_victim = os.path.join(tmp_arts, "victim")
    with open(tmp_victim, "w") as f:
        f.write("not an artifact\n")
    params, errlog = server(["--worktree", WORKTREE, "--artifacts", tmp_arts], "plants2.log", env=env)
    try:
        with errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    r, t = await run(session, f"ln -s {victim} {tmp_arts}/cmd-11.txt && mkfifo {tmp_arts}/cmd-12.txt "
                                              f"&& ln {tmp_victim} {tmp_arts}/cmd-13.txt && echo planted")
                    check("planted" in t, f"plants made from the sandbox in /tmp ({t[-200:]!r})")
                    for art, found in [("cmd-11.txt", "a symbolic link"), ("cmd-12.txt", "a FIFO"),
                                       ("cmd-13.txt", "a file with 2 hard links")]:
                        for args in [{"artifact_id": art}, {"artifact_id": art, "search": "secret"}]:
                            t0 = time.monotonic()
                            with anyio.fail_after(10):
                                r, t = await call(session, "read_command_output", args)
                            want = f'Refusing to read "{art}": it is {found}, not an output artifact written by this server.'
                            check(r.is_error and t.startswith(want) and time.monotonic() - t0 < 5,
                                  f"{art} ({found}) refused: {t!r}")
    finally:
        import shutil
        shutil.rmtree(tmp_arts, ignore_errors=True)


async def case_search():
    task = os.path.join(SCRATCH, "task")
    os.makedirs(task, exist_ok=True)
    params, errlog = server(["--cwd", task], "search.log")
    with errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                pid = await server_pid(session)
                # 16 MiB of an ordinary log: `[^"]*error` was ~24 s per MiB.
                r, t = await run(session, "i=0; while [ $i -lt 4000 ]; do echo \"$i info: worker ok, queue 3\"; i=$((i+1)); done > /tmp/.x-$$; "
                                          "echo 'one error here' >> /tmp/.x-$$; for k in $(seq 1 160); do cat /tmp/.x-$$; done | head -c 16777216; rm -f /tmp/.x-$$")
                m = re.search(r"Artifact ID: (cmd-\d+\.txt)", t)
                log = m.group(1) if m else None
                t0 = time.monotonic()
                r, t = await call(session, "read_command_output", {"artifact_id": log, "search": '[^"]*error'})
                took = time.monotonic() - t0
                n = re.search(r"Total matches: (\d+) \|", t)
                check(n is not None and int(n.group(1)) >= 100 and "Search stopped" not in t,
                      f'[^"]*error over 16 MiB answered in {took:.1f}s ({t[:100]!r})')
                t0 = time.monotonic()
                r, t = await call(session, "read_command_output", {"artifact_id": log, "search": "(a{1,100}){1,100}b"})
                check(t.startswith("Search pattern too complex") and time.monotonic() - t0 < 2,
                      f"(a{{1,100}}){{1,100}}b refused at once ({t[:90]!r})")
                # 64 MB of `a` lines and a slow pattern: cancel the call after 1 s; the server
                # must stop working on it.
                r, t = await run(session, "yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa | head -c 64000000")
                m = re.search(r"Artifact ID: (cmd-\d+\.txt)", t)
                big = m.group(1) if m else None
                hz = os.sysconf("SC_CLK_TCK")
                before = cpu_ticks(pid)
                with anyio.move_on_after(1.0):
                    await call(session, "read_command_output", {"artifact_id": big, "search": "(a{1,30}){1,30}b"})
                busy = (cpu_ticks(pid) - before) / hz
                await asyncio.sleep(0.5)  # the search notices between windows
                before = cpu_ticks(pid)
                await asyncio.sleep(2.0)
                idle = (cpu_ticks(pid) - before) / hz
                # `busy` only shows the search was working when cancelled (on a loaded machine
                # it gets a fraction of a core); the claim is that it then stops.
                check(busy > 0.05 and idle < 0.2,
                      f"a cancelled search stops: {busy:.2f}s CPU in the call's second, {idle:.2f}s in 2 s after")
                r, t = await run(session, "echo still-answering")
                check("still-answering" in t, "the server answers after the cancelled search")


async def case_huge():
    task = os.path.join(SCRATCH, "task")
    os.makedirs(os.path.join(task, ".shofer"), exist_ok=True)
    with open(os.path.join(task, ".shofer", "shoferignore"), "w") as f:
        f.write("secrets/\n.env\n")
    params, errlog = server(["--cwd", task], "huge.log")
    with errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                pid = await server_pid(session)
                huge = "a|" * (7 << 20) + "a"  # 14 MiB
                t0 = time.monotonic()
                pending = asyncio.create_task(run(session, huge))
                await asyncio.sleep(0.05)
                t1 = time.monotonic()
                r, t = await run(session, "echo concurrent")
                latency = time.monotonic() - t1
                r2, t2 = await pending
                took = time.monotonic() - t0
                check(r2.is_error and t2.startswith(f"The command is {len(huge)} bytes long; the kernel refuses any single argument of 131072 bytes"),
                      f"a 14 MiB command is refused before parsing, in {took:.2f}s ({t2[:80]!r})")
                check("concurrent" in t and latency < 2.0, f"a concurrent call answered in {latency:.2f}s")
                hwm = status_kb(pid, "VmHWM")
                check(hwm < 400 * 1024, f"peak RSS {hwm} kB (was 1.7-3 GB)")
                # Just under the limit: the ignore check runs, bounded in time, off the
                # server's thread.
                under = "a|" * 60000 + "cat .env"
                t0 = time.monotonic()
                pending = asyncio.create_task(run(session, under))
                await asyncio.sleep(0.05)
                t1 = time.monotonic()
                r, t = await run(session, "echo concurrent")
                latency = time.monotonic() - t1
                r2, t2 = await pending
                took = time.monotonic() - t0
                check(r2.is_error and '"path":".env"' in t2 and took < 5, f"a {len(under)}-byte command is checked in {took:.2f}s ({t2[:120]!r})")
                check("concurrent" in t and latency < 2.0, f"a concurrent call answered in {latency:.2f}s meanwhile")
                hwm = status_kb(pid, "VmHWM")
                check(hwm < 400 * 1024, f"peak RSS {hwm} kB after both")


async def case_shutdown():
    task = os.path.join(SCRATCH, "task")
    os.makedirs(task, exist_ok=True)
    marker = f"shofer-shut-{uuid.uuid4().hex[:12]}"
    n = int(os.environ.get("SHOFER_SHUTDOWN_COMMANDS", "1000"))
    params, errlog = server(["--cwd", task], "shutdown.log")
    with errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                pid = await server_pid(session)
                sem = asyncio.Semaphore(50)

                async def start(i):
                    # Half of them ignore SIGTERM (the tree kill must SIGKILL them).
                    body = "trap '' TERM; sleep 600" if i % 2 else "sleep 600"
                    async with sem:
                        return await run(session, f"sh -c \"{body}\" {marker}-{i}", timeout=0.05)

                t0 = time.monotonic()
                results = await asyncio.gather(*(start(i) for i in range(n)))
                running = sum("Command is still running" in t for _, t in results)
                print(f"note started {n} background commands in {time.monotonic() - t0:.1f}s")
                check(running == n, f"{n} commands running in the background ({running})")
                for _ in range(200):
                    if len(procs_with(marker)) >= n:
                        break
                    await asyncio.sleep(0.05)
                check(len(procs_with(marker)) >= n, f"their processes are up ({len(procs_with(marker))})")
                # Watched from the moment stdin closes, beside the client's wait for the server.
                closed = threading.Event()
                gone = []

                def watch():
                    closed.wait()
                    t = time.monotonic()
                    while time.monotonic() - t < 30:
                        if not procs_with(marker):
                            gone.append(time.monotonic() - t)
                            return
                        time.sleep(0.02)

                watcher = threading.Thread(target=watch)
                watcher.start()
            t_close = time.monotonic()
            closed.set()
        # stdio_client has closed stdin and waited for the server (it kills it after 2 s).
        server_ended = time.monotonic() - t_close
    watcher.join()
    gone_at = gone[0] if gone else None
    with open(os.path.join(SCRATCH, "shutdown.log")) as f:
        err = f.read()
    check("session closed;" in err, f"the server ended on stdin EOF by itself ({err.strip()[-160:]!r})")
    check(server_ended < 2.0, f"the server exited {server_ended:.2f}s after stdin closed (the client kills it at 2 s)")
    check(gone_at is not None and gone_at <= 1.0,
          f"every process gone within 1 s of stdin closing ({gone_at if gone_at is None else round(gone_at, 2)}s; left {len(procs_with(marker))})")
    for p in procs_with(marker):  # leave the machine clean whatever happened
        try:
            os.kill(p, 9)
        except OSError:
            pass


async def case_disk():
    task = os.path.join(SCRATCH, "task")
    os.makedirs(task, exist_ok=True)
    params, errlog = server(["--cwd", task, "--preview", "small", "--max-artifact-bytes", "100000"], "disk.log")
    with errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                r, t = await run(session, "yes 0123456789 | head -c 5000000; echo; echo LAST-LINE")
                m = re.search(r"Artifact ID: (cmd-\d+\.txt)", t)
                with open(os.path.join(SCRATCH, "disk.log")) as f:
                    arts = re.search(r"artifacts in (\S+)", f.read()).group(1)
                size = os.path.getsize(os.path.join(arts, m.group(1))) if m else None
                check("Output (4.8MB) could not be fully persisted: the artifact size cap of 100000 bytes was reached" in t
                      and "holds only the first 97.7KB" in t and "LAST-LINE" in t and size == 100000,
                      f"--max-artifact-bytes: stored {size} bytes, counted all, said so ({t[:260]!r})")
                # Still running after spilling: the text names the artifact.
                r, t = await run(session, "seq 1 100000; sleep 30", timeout=1.5)
                check(t.startswith("Command is still running") and re.search(r"is in artifact cmd-\d+\.txt; read_command_output reads it while the command runs", t),
                      f"the still-running text names the artifact ({t[-200:]!r})")
                # The artifact directory removed while the command runs: not advertised.
                r, t = await run(session, f"seq 1 20000; rm -rf '{arts}'; echo after-removal")
                check("could not be persisted: the artifact file was removed while the command ran. Only the preview below is available." in t
                      and "Artifact ID" not in t and "after-removal" in t,
                      f"an artifact removed mid-run is not advertised ({t[:240]!r})")


async def case_runaway():
    task = os.path.join(SCRATCH, "task")
    os.makedirs(task, exist_ok=True)
    marker = f"shofer-runaway-{uuid.uuid4().hex[:12]}"
    writers = [
        ("yes &", f"yes {marker} & echo started", None),
        ("a shell loop &", f"(while :; do echo {marker}; done) & echo started", None),
        ("yes past a soft timeout", f"yes {marker}", 1.0),
    ]
    await runaway_session(["--cwd", task], writers, marker, "runaway.log")
    if WORKTREE:
        # The same under the sandbox (--keep-descendants --status-fd: bwrap refuses those).
        for backend in ["auto", "layered", "userns", "landlock"]:
            await runaway_session(["--worktree", WORKTREE, "--backend", backend],
                                  [(f"{what} ({backend})", c, t) for what, c, t in writers[0::2]],
                                  marker, f"runaway-{backend}.log")


async def runaway_session(args, writers, marker, log):
    # The server and its guardian carry this in their command lines ($PPID under a sandbox is
    # the sandbox's supervisor).
    session_marker = f"runaway-session-{uuid.uuid4().hex[:12]}"
    params, errlog = server([*args, "--max-artifact-bytes", "1000000", "--env", f"SHOFER_TEST={session_marker}"], log)
    with errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                servers = procs_with(session_marker)
                check(len(servers) == 2, f"the server and its guardian ({servers})")
                for what, command, timeout in writers:
                    r, t = await run(session, command, timeout=timeout)
                    m = re.search(r"terminate_command (\d+) stops them", t) or re.search(r"cmd-(\d+)\.txt", t)
                    check(m is not None and ("still running" in t), f"{what}: started in the background ({t[:200]!r})")
                    if not m:
                        continue
                    cid = m.group(1)
                    first = t
                    await asyncio.sleep(1.0)
                    procs = procs_with(marker)
                    check(procs != [], f"{what}: the writer runs ({procs})")
                    before = {p: cpu_ticks(p) for p in procs}
                    s0 = sum(cpu_ticks(p) for p in servers)
                    await asyncio.sleep(2.0)
                    used = {p: cpu_ticks(p) - before[p] for p in procs if os.path.exists(f"/proc/{p}")}
                    s1 = sum(cpu_ticks(p) for p in servers) - s0
                    tick = os.sysconf("SC_CLK_TCK")
                    # Unthrottled, the writer and the server's pump each take most of a core.
                    check(all(u < 0.15 * 2 * tick for u in used.values()) and s1 < 0.15 * 2 * tick,
                          f"{what}: throttled at the cap: writer ticks {used}, server {s1} in 2 s (tick {tick}/s)")
                    # In the command's own result when the cap came first, else in the next one.
                    r, t = await call(session, "list_commands")
                    both = first + t
                    check(both.count(f"Note: command {cid} ") == 1 and f"terminate_command (execution_id {cid})" in both
                          and "size cap of 976.6KB" in both,
                          f"{what}: the next result says so and names terminate_command ({t[-420:]!r})")
                    r, t = await call(session, "list_commands")
                    check(f"Note: command {cid} " not in t, f"{what}: said once")
                    r, t = await call(session, "terminate_command", {"execution_id": int(cid)})
                    for _ in range(100):
                        if not procs_with(marker):
                            break
                        await asyncio.sleep(0.05)
                    check(procs_with(marker) == [], f"{what}: terminate_command stopped it ({t[:160]!r})")
    for p in procs_with(marker):  # leave the machine clean whatever happened
        try:
            os.kill(p, 9)
        except OSError:
            pass


async def main():
    await {"load": case_load, "plants": case_plants, "search": case_search, "huge": case_huge,
           "shutdown": case_shutdown, "disk": case_disk,
           "runaway": case_runaway}[CASE]()
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
