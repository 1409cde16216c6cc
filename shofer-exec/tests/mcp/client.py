#!/usr/bin/env python3
"""Drives `shofer serve` with the official MCP Python SDK (the `mcp` package) over stdio.

Usage: client.py SHOFER_BINARY SCRATCH_DIR [TRANSCRIPT_FILE [WORKTREE_DIR]]

One real session: initialize, list the tools, run a short command, run one past its soft
timeout and see it in list_commands as running, read and search its artifact, terminate it and
check that no process of it is left (a /proc scan for a unique marker), the shoferignore cases,
the error texts of Appendix A, then close stdin with a background command still running and
check that the server exited on its own (before the client's kill fallback) and that no child
of it is left. Exits 0 when every check passed; prints each failed check otherwise.

Called by the cargo test shofer-exec/tests/mcp.rs (which builds the binary).
"""

import asyncio
import json
import os
import re
import sys
import time
import uuid

import anyio

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

SHOFER, SCRATCH = sys.argv[1], sys.argv[2]
# The servers' own artifact directories (without --artifacts) go to scratch directories, also
# when a test leaves a server killed: $TMPDIR for plain servers; a --worktree server's state
# directory is set beside the worktree (outside /tmp, which its commands may write).
SERVER_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": SCRATCH}
TRANSCRIPT = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else None
WORKTREE = sys.argv[4] if len(sys.argv) > 4 else None

failures = []
transcript = []


def check(cond, what):
    if cond:
        print(f"ok   {what}")
    else:
        print(f"FAIL {what}")
        failures.append(what)


def procs_with(marker):
    """PIDs whose command line contains `marker` (not zombies: they have an empty cmdline)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if marker.encode() in cmd:
            found.append(int(d))
    return found


async def wait_procs(marker, n, limit=10.0):
    """Polls until at least `n` processes carry `marker` (or `limit` seconds pass)."""
    deadline = time.monotonic() + limit
    while len(procs_with(marker)) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return procs_with(marker)


def pid_alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def text_of(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def call(session, name, args=None):
    result = await session.call_tool(name, args or {})
    text = text_of(result)
    transcript.append({"tool": name, "arguments": args or {}, "isError": bool(result.is_error), "text": text})
    return result, text


async def session_run(task, errlog_path):
    params = StdioServerParameters(
        command=SHOFER,
        args=["serve", "--cwd", task, "--preview", "small"],
        env=SERVER_ENV,
    )
    marker = f"shofer-mcp-{uuid.uuid4().hex[:12]}"
    marker2 = f"shofer-mcp-close-{uuid.uuid4().hex[:12]}"
    with open(errlog_path, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                transcript.append({"initialize": {"protocolVersion": init.protocol_version,
                                                  "serverInfo": init.server_info.model_dump(exclude_none=True)}})
                check(init.server_info.name == "shofer", "initialize: serverInfo.name is shofer")

                tools = await session.list_tools()
                names = sorted(t.name for t in tools.tools)
                transcript.append({"tools/list": names})
                check(names == ["execute_command", "list_commands", "read_command_output", "terminate_command"],
                      f"tools/list gives the four tools ({names})")
                ex = next(t for t in tools.tools if t.name == "execute_command")
                check(sorted(ex.input_schema.get("properties", {})) == ["command", "cwd", "timeout"],
                      "execute_command has command, cwd, timeout")
                check("cd and export do not carry over" in (ex.description or ""),
                      "execute_command says that cd and export do not carry over between calls")
                rd = next(t for t in tools.tools if t.name == "read_command_output")
                check(sorted(rd.input_schema.get("properties", {})) == ["artifact_id", "limit", "offset", "search"]
                      and rd.input_schema.get("required") == ["artifact_id"],
                      "read_command_output has artifact_id (required), search, offset, limit")

                # A short command: the inline text of ARCHITECTURE §3.3, exactly.
                r, t = await call(session, "execute_command", {"command": "echo hello-mcp; echo $PPID", "cwd": None, "timeout": None})
                m = re.fullmatch(r"Command executed in terminal within working directory '(.*)'\. Exit code: 0\nOutput:\nhello-mcp\n(\d+)\n", t)
                check(not r.is_error and m is not None and m.group(1) == task, f"short command: inline result text ({t!r})")
                server_pid = int(m.group(2)) if m else None

                r, t = await call(session, "execute_command", {"command": "echo oops >&2; exit 3", "cwd": None, "timeout": None})
                check("Command execution was not successful, inspect the cause and adjust as needed." in t
                      and "Exit code: 3" in t and "oops" in t, "exit 3: failure wording and the exit code")

                r, t = await call(session, "execute_command", {"command": "echo big", "cwd": None, "timeout": 1e300})
                check(not r.is_error and t.endswith("Output:\nbig\n"), f"a huge soft timeout is just a long one ({t!r})")
                r, t = await call(session, "execute_command", {"command": "pwd", "cwd": "sub", "timeout": None})
                check(t.endswith(f"{task}/sub\n"), "relative cwd resolved against the task cwd")
                r, t = await call(session, "execute_command", {"command": "pwd", "cwd": "nope", "timeout": None})
                check(r.is_error and t == f"Working directory '{task}/nope' does not exist.", f"missing cwd text ({t!r})")

                # Past the soft timeout: output spills (small preview: 5120 bytes), the command
                # keeps running with a setsid'd grandchild, both carrying the marker.
                cmd = (f"seq 1 3000 | sed 's/^/row /'; echo NEEDLE-in-the-output; "
                       f"(setsid sh -c 'sleep 301' {marker}-daemon &); sh -c 'sleep 300' {marker}")
                t0 = time.monotonic()
                r, t = await call(session, "execute_command", {"command": cmd, "cwd": None, "timeout": 1.5})
                waited = time.monotonic() - t0
                check(not r.is_error and t.startswith(f"Command is still running in terminal from '{task}'.\nHere's the output so far:")
                      and t.rstrip().endswith("You will be updated on the terminal status and new output in the future."),
                      "soft timeout: the still-running text")
                check(1.4 <= waited < 10, f"soft timeout returned after {waited:.2f}s")
                running = await wait_procs(marker, 2)
                check(len(running) >= 2, f"background command and its daemon are running ({running})")

                r, t = await call(session, "list_commands")
                cmds = json.loads(t)["commands"]
                bg = [c for c in cmds if marker in c["command"]]
                check(len(bg) == 1 and bg[0]["status"] == "running" and bg[0]["exit_code"] is None,
                      "list_commands shows it as running")
                check([c["status"] for c in cmds[:2]] == ["exited", "exited"] and cmds[1]["exit_code"] == 3,
                      "list_commands shows the finished ones with their exit codes")
                artifact = bg[0]["artifact_id"] if bg else None
                check(artifact is not None and re.fullmatch(r"cmd-\d+\.txt", artifact) is not None,
                      f"its output spilled to an artifact ({artifact})")
                exec_id = bg[0]["id"] if bg else None

                r, t = await call(session, "read_command_output", {"artifact_id": artifact, "offset": 0, "limit": 40})
                check(t.startswith(f"[Command Output: {artifact}]\nTotal size: ") and "| row 1\n" in t and "TRUNCATED" in t,
                      f"read mode: header and numbered lines ({t!r})")
                r, t = await call(session, "read_command_output", {"artifact_id": artifact, "search": "needle-IN"})
                check(t.startswith(f'[Command Output: {artifact}] (search: "needle-IN")\nTotal matches: 1 | Showing first 1\n\n')
                      and " 3001 | NEEDLE-in-the-output" in t, f"search mode: case-insensitive match with its line number ({t!r})")
                r, t = await call(session, "read_command_output", {"artifact_id": artifact, "search": "row 2999|row 3000$"})
                check("Total matches: 2" in t, "search mode: a regex")
                r, t = await call(session, "read_command_output", {"artifact_id": "../../etc/passwd"})
                check(r.is_error and t.startswith('Invalid artifact_id format: "../../etc/passwd".'), "bad artifact id refused")
                r, t = await call(session, "read_command_output", {"artifact_id": "cmd-1.txt"})
                check(r.is_error and t.startswith('Artifact not found: "cmd-1.txt".'), "unknown artifact")

                r, t = await call(session, "terminate_command", {"execution_id": exec_id})
                check(not r.is_error and f"Command {exec_id} " in t and "was terminated" in t, f"terminate_command ({t[:120]!r})")
                left = procs_with(marker)
                check(left == [], f"no process of the terminated command is left ({left})")
                r, t = await call(session, "list_commands")
                st = [c["status"] for c in json.loads(t)["commands"] if c["id"] == exec_id]
                check(st == ["terminated"], f"list_commands shows it terminated ({st})")
                r, t = await call(session, "terminate_command", {"execution_id": 12345})
                check(r.is_error and t.startswith("No command with execution id 12345."), "terminate: unknown id")

                # shoferignore (the task's .shofer/shoferignore).
                for c, path in [("cat secrets/creds.json | grep password", "secrets/creds.json"),
                                ("grep pattern .git/config", ".git/config"),
                                ("head -n 5 app.log secrets/keys.json", "secrets/keys.json"),
                                ("echo x && cat .env", ".env"),
                                ("sudo cat .env", ".env"),
                                ("bash -c 'cat .env'", ".env")]:
                    r, t = await call(session, "execute_command", {"command": c, "cwd": None, "timeout": None})
                    want = {"status": "error", "type": "access_denied", "message": "Access blocked by shoferignore",
                            "path": path, "suggestion": "Try to continue without this file, or ask the user to update the shoferignore file"}
                    check(r.is_error and json.loads(t) == want and list(json.loads(t)) == list(want),
                          f"refused: {c} ({t})")
                for c in ["ls", "git status", "ps -ef | grep node"]:
                    r, t = await call(session, "execute_command", {"command": c, "cwd": None, "timeout": None})
                    check(not r.is_error and t.startswith("Command executed"), f"allowed: {c}")

                r, t = await call(session, "execute_command", {"cwd": None, "timeout": None})
                check(r.is_error and t == '{"status":"error","message":"The tool execution failed","error":"Missing value for required parameter \'command\'. Please retry with complete response."}',
                      f"missing parameter text ({t})")
                r, t = await call(session, "read_command_output", {})
                check(r.is_error and "Missing value for required parameter 'artifact_id'" in t, "missing artifact_id")

                # Calls run concurrently: while an execute_command waits for its command,
                # list_commands answers and terminate_command ends it; the waiting call then
                # returns the terminated result.
                marker4 = f"shofer-mcp-conc-{uuid.uuid4().hex[:12]}"
                pending = asyncio.create_task(call(session, "execute_command", {"command": f"echo started; sh -c 'sleep 307' {marker4}", "cwd": None, "timeout": None}))
                await wait_procs(marker4, 1)
                r, t = await call(session, "list_commands")
                ids = [c["id"] for c in json.loads(t)["commands"] if marker4 in c["command"] and c["status"] == "running"]
                check(len(ids) == 1, "list_commands answers while another call waits")
                if ids:
                    await call(session, "terminate_command", {"execution_id": str(ids[0])})
                r, t = await asyncio.wait_for(pending, 10)
                check("Process terminated by signal SIGTERM" in t and "started" in t and procs_with(marker4) == [],
                      f"terminate_command ends a command another call waits for ({t!r})")

                # The client gives up on a call (anyio cancel scope): it sends
                # notifications/cancelled, and the server aborts the command, tree and all.
                marker3 = f"shofer-mcp-cancel-{uuid.uuid4().hex[:12]}"
                with anyio.move_on_after(1.0):
                    await session.call_tool("execute_command", {"command": f"sh -c 'sleep 305' {marker3}", "cwd": None, "timeout": None})
                for _ in range(250):
                    if not procs_with(marker3):
                        break
                    await asyncio.sleep(0.02)
                check(procs_with(marker3) == [], "a cancelled call aborts its command (no process left)")
                r, t = await call(session, "list_commands")
                st = [c["status"] for c in json.loads(t)["commands"] if marker3 in c["command"]]
                check(st == ["terminated"], f"the cancelled command is listed as terminated ({st})")

                # Leave one running (with a daemon) and close stdin.
                cmd2 = f"(setsid sh -c 'sleep 303' {marker2}-daemon &); sh -c 'sleep 302' {marker2}"
                r, t = await call(session, "execute_command", {"command": cmd2, "cwd": None, "timeout": 0.5})
                check(len(await wait_procs(marker2, 2)) >= 2, "a background command is running at close")
            t_close = time.monotonic()
        closed_in = time.monotonic() - t_close
    return server_pid, marker2, closed_in


async def spill_and_background(session, marker):
    """Runs a command that spills and one left in the background; returns the artifact id."""
    r, t = await call(session, "execute_command", {"command": "seq 1 5000", "cwd": None, "timeout": None})
    m = re.search(r"Artifact ID: (cmd-\d+\.txt)", t)
    r, t = await call(session, "execute_command", {"command": f"echo $PPID; sh -c 'sleep 304' {marker}", "cwd": None, "timeout": 0.5})
    pid = re.search(r"^(\d+)$", t, re.M)
    await wait_procs(marker, 1)
    return (m.group(1) if m else None), (int(pid.group(1)) if pid else None)


async def signal_and_artifacts_run(task, arts):
    """SIGTERM ends the session: commands killed, only this server's artifacts removed from a
    user-named directory. Then --keep-artifacts keeps them."""
    os.makedirs(arts, exist_ok=True)
    foreign = os.path.join(arts, "cmd-1.txt")
    with open(foreign, "w") as f:
        f.write("another server's artifact\n")
    marker = f"shofer-mcp-term-{uuid.uuid4().hex[:12]}"
    errlog_path = os.path.join(SCRATCH, "server-stderr-2.log")
    params = StdioServerParameters(command=SHOFER, args=["serve", "--cwd", task, "--preview", "small", "--artifacts", arts],
                                   env=SERVER_ENV)
    with open(errlog_path, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                artifact, server_pid = await spill_and_background(session, marker)
                check(artifact is not None and os.path.exists(os.path.join(arts, artifact)), f"artifact {artifact} in --artifacts dir")
                check(len(procs_with(marker)) >= 1, "background command running before SIGTERM")
                os.kill(server_pid, 15)
                for _ in range(500):
                    if not pid_alive(server_pid):
                        break
                    await asyncio.sleep(0.02)
                check(not pid_alive(server_pid), "server exits on SIGTERM")
                check(procs_with(marker) == [], "SIGTERM: no child of the server is left")
    with open(errlog_path) as f:
        err = f.read()
    check("signal 15; 1 running command(s) killed" in err, f"server reports the signal ({err.strip()!r})")
    check(artifact is not None and not os.path.exists(os.path.join(arts, artifact)), "its own artifact removed")
    check(os.path.exists(foreign), "another server's artifact in the same directory kept")

    # Hard (user) timeout and its allowlist.
    marker = f"shofer-mcp-hard-{uuid.uuid4().hex[:12]}"
    params = StdioServerParameters(command=SHOFER, args=["serve", "--cwd", task, "--hard-timeout", "1",
                                                         "--timeout-allowlist", "echo allowed"],
                                   env=SERVER_ENV)
    with open(os.path.join(SCRATCH, "server-stderr-4.log"), "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                r, t = await call(session, "execute_command", {"command": f"sh -c 'sleep 306' {marker}", "cwd": None, "timeout": None})
                check(t == "The command was terminated after exceeding a user-configured 1s timeout. Do not try to re-run the command.",
                      f"hard timeout text ({t!r})")
                check(procs_with(marker) == [], "hard timeout: no process left")
                r, t = await call(session, "execute_command", {"command": "echo allowed; sleep 1.5", "cwd": None, "timeout": None})
                check(t.endswith("Exit code: 0\nOutput:\nallowed\n"), f"allowlisted command outlives the hard timeout ({t!r})")
                r, t = await call(session, "list_commands")
                check([c["status"] for c in json.loads(t)["commands"]] == ["timed out", "exited"], "list_commands: timed out, exited")

    marker = f"shofer-mcp-keep-{uuid.uuid4().hex[:12]}"
    params = StdioServerParameters(command=SHOFER, args=["serve", "--cwd", task, "--preview", "small", "--keep-artifacts"],
                                   env=SERVER_ENV)
    errlog_path = os.path.join(SCRATCH, "server-stderr-3.log")
    with open(errlog_path, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                artifact, _ = await spill_and_background(session, marker)
    with open(errlog_path) as f:
        err = f.read()
    m = re.search(r"artifacts in (\S+)", err)
    kept = os.path.join(m.group(1), artifact) if m and artifact else None
    check(kept is not None and os.path.exists(kept), f"--keep-artifacts keeps {kept}")
    check(procs_with(marker) == [], "--keep-artifacts session: no child left")
    if m:
        import shutil
        shutil.rmtree(m.group(1), ignore_errors=True)


async def worktree_run(wt):
    """`--worktree`: commands run inside shofer-sandbox, writes outside the worktree fail."""
    outside = os.path.join(os.path.dirname(wt), f"outside-{uuid.uuid4().hex[:8]}")
    params = StdioServerParameters(command=SHOFER, args=["serve", "--worktree", wt],
                                   env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
                                        "XDG_STATE_HOME": os.path.join(os.path.dirname(wt), "state")})
    with open(os.path.join(SCRATCH, "server-stderr-5.log"), "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                r, t = await call(session, "execute_command", {"command": f"touch inside && touch {outside}", "cwd": None, "timeout": None})
                check(os.path.exists(os.path.join(wt, "inside")), "worktree: a write inside the worktree works")
                check(not os.path.exists(outside) and "Exit code: 1" in t, f"worktree: a write outside is refused ({t!r})")


async def issue13_run(task, wt=None):
    """Issue 13's cases through `shofer serve`, plain or with `--worktree`: nothing waits for a
    person, output kept at a hard timeout, background processes kept and named (plain), escape
    sequences stripped, a running command's small output readable, concurrent artifacts
    unique, sandbox denials explained (worktree)."""
    mode = "worktree" if wt else "plain"
    args = ["serve", "--preview", "small", "--hard-timeout", "4"]
    args += ["--worktree", wt] if wt else ["--cwd", task]
    home = os.environ.get("HOME", "/root")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
           "EDITOR": "vim", "GIT_EDITOR": "vim", "PAGER": "less", "TERM": "xterm-256color"}
    marker = f"shofer-mcp-13-{uuid.uuid4().hex[:12]}"
    with open(os.path.join(SCRATCH, f"server-stderr-13-{mode}.log"), "w") as errlog:
        async with stdio_client(StdioServerParameters(command=SHOFER, args=args, env=env), errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                ex = lambda c, timeout=None: call(session, "execute_command", {"command": c, "cwd": None, "timeout": timeout})
                # 1. An inherited EDITOR=vim does not hang git commit.
                t0 = time.monotonic()
                r, t = await ex("git init -q repo13 && cd repo13 && echo x > f && git add f && "
                                "git -c user.name=a -c user.email=a@b commit; echo rc=$?")
                check(time.monotonic() - t0 < 15 and "Aborting commit due to empty commit message" in t and "rc=1" in t,
                      f"13/{mode}: git commit without -m returns at once ({t!r})")
                r, t = await ex("echo $EDITOR $PAGER $TERM $NO_COLOR $PYTHONUNBUFFERED")
                check(t.endswith("\ntrue cat dumb 1 1\n"), f"13/{mode}: non-interactive defaults ({t!r})")
                # 2. The hard timeout keeps the output (Python unbuffered by default).
                r, t = await ex(f"python3 -c 'import time; print(\"py-said\"); time.sleep(60)' {marker}")
                check(t.startswith("The command was terminated after exceeding a user-configured 4s timeout.")
                      and t.endswith("\n\nOutput:\npy-said\n"), f"13/{mode}: hard timeout keeps the output ({t!r})")
                # 5. Escape sequences and carriage-return rewrites never reach the model.
                r, t = await ex(r"printf '\033[31m FAIL \033[39m a.test.ts\n'; printf '10%%\r50%%\r100%%\n'")
                check(t.endswith("Output:\n FAIL  a.test.ts\n100%\n"), f"13/{mode}: escapes stripped ({t!r})")
                r, t = await ex(r"i=0; while [ $i -lt 700 ]; do printf '\033[32m PASS \033[39m t%d\n' $i; i=$((i+1)); done")
                a = re.search(r"Artifact ID: (cmd-\d+\.txt)", t)
                r2, t2 = await call(session, "read_command_output", {"artifact_id": a.group(1) if a else "cmd-0.txt", "search": "pass  t699"})
                check(a is not None and "\x1b" not in t and "  700 |  PASS  t699" in t2 and "\x1b" not in t2,
                      f"13/{mode}: search sees the stripped text ({t2!r})")
                # 9. A running command's output below the preview size is readable.
                r, t = await ex(f"echo serving; sh -c 'sleep 310' {marker}-9", 1.0)
                a = re.search(r"is in artifact (cmd-\d+\.txt)", t)
                r2, t2 = await call(session, "read_command_output", {"artifact_id": a.group(1) if a else "cmd-0.txt"})
                check(a is not None and "1 | serving" in t2, f"13/{mode}: read while running below the preview size ({t2!r})")
                # 6. Concurrent calls: distinct artifacts, each complete.
                rs = await asyncio.gather(*[ex("seq 1 20000") for _ in range(16)])
                ids = [re.search(r"Artifact ID: (cmd-\d+\.txt)", t).group(1) for _, t in rs if "Artifact ID" in t]
                check(len(set(ids)) == 16, f"13/{mode}: 16 concurrent commands, 16 artifacts ({len(set(ids))})")
                if wt:
                    # 10. A refused write outside the writable set is explained.
                    r, t = await ex(f"mkdir -p {home}/.shofer-denied-{uuid.uuid4().hex[:8]}/cache")
                    # The note is the engine's own words: it names the writable places it
                    # configured, never a path the command printed (issue 29 F10).
                    note = t.rstrip().splitlines()[-1]
                    check(note.startswith("Note: the output above shows a write outside the sandbox's writable places refused")
                          and "npm_config_cache=" in note and ".shofer-denied-" not in note,
                          f"13/{mode}: denial explained ({t!r})")
                # 3. Background processes keep running, are named, listed, and stoppable.
                port = 18000 + os.getpid() % 1000 + (1 if wt else 0)
                r, t = await ex(f"python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 & sleep 0.5; echo started")
                check("Exit code: 0; 1 background process(es) still running (python3)" in t and t.endswith("started\n"),
                      f"13/{mode}: background process named ({t!r})")
                r2, t2 = await ex(f"python3 -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:{port}/\").status)'")
                check(t2.endswith("Output:\n200\n"), f"13/{mode}: the next call reaches the server ({t2!r})")
                r3, t3 = await call(session, "list_commands")
                bg = [c for c in json.loads(t3)["commands"] if "http.server" in c["command"]]
                check(len(bg) == 1 and bg[0]["status"] == "exited" and bg[0]["background"] == ["python3"],
                      f"13/{mode}: list_commands shows it ({bg})")
                if bg:
                    await call(session, "terminate_command", {"execution_id": bg[0]["id"]})
                r4, t4 = await ex(f"python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:{port}/\")' 2>&1 | tail -1")
                check("Connection refused" in t4, f"13/{mode}: terminate_command stopped it ({t4!r})")
    check(procs_with(marker) == [], f"13/{mode}: nothing left after the session")


async def main():
    task = os.path.join(SCRATCH, "task")
    os.makedirs(os.path.join(task, ".shofer"), exist_ok=True)
    os.makedirs(os.path.join(task, "secrets"), exist_ok=True)
    os.makedirs(os.path.join(task, "sub"), exist_ok=True)
    os.makedirs(os.path.join(task, ".git"), exist_ok=True)
    with open(os.path.join(task, ".shofer", "shoferignore"), "w") as f:
        f.write("# files the agent must not read\nsecrets/\n.env\n/.git/config\n")
    for name, body in [("secrets/creds.json", '{"password":"x"}\n'), ("secrets/keys.json", "{}\n"),
                       (".env", "TOKEN=x\n"), (".git/config", "[core]\n"), ("app.log", "log\n")]:
        with open(os.path.join(task, name), "w") as f:
            f.write(body)
    errlog_path = os.path.join(SCRATCH, "server-stderr.log")
    server_pid, marker2, closed_in = await session_run(task, errlog_path)

    with open(errlog_path) as f:
        err = f.read()
    print("server stderr:\n" + err)
    # The client closes stdin, then waits 2 s before SIGTERM to the server's process group:
    # the "session closed" line (not "signal 15") shows the server left on stdin EOF itself.
    print(f"note the session closed in {closed_in:.2f}s")
    check("shofer serve: session closed;" in err and err.rstrip().endswith("exiting"),
          "the server exited on its own on stdin EOF")
    check(server_pid is not None and not pid_alive(server_pid), f"server process {server_pid} is gone")
    check("session closed; 1 running command(s) killed" in err, "server reports killing the running command at close")
    left = procs_with(marker2)
    check(left == [], f"no child of the server is left after stdin closed ({left})")
    m = re.search(r"artifacts in (\S+)", err)
    check(m is not None and not os.path.exists(m.group(1)), "the temporary artifact directory is removed")

    await signal_and_artifacts_run(task, os.path.join(SCRATCH, "arts"))
    if WORKTREE:
        await worktree_run(WORKTREE)
    await issue13_run(task)
    if WORKTREE:
        await issue13_run(task, WORKTREE)

    if TRANSCRIPT:
        with open(TRANSCRIPT, "w") as f:
            for entry in transcript:
                f.write(json.dumps(entry) + "\n")
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
