"""The agent's side of scripts/test-agent-setup: reads the MCP server entry `shofer init claude`
wrote into ~/.claude.json, starts that server with the official MCP Python client (as Claude
Code would: the entry's command and args, the project as the working directory), and runs an
`npm install` of a package served on loopback and a `cargo build` of a crate with a new git
dependency through execute_command. Exits non-zero naming the first failure."""

import asyncio
import json
import os
import sys

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def fail(msg):
    print(f"FAIL: agent-setup-client: {msg}", file=sys.stderr)
    sys.exit(1)


async def main(project, steps):
    with open(os.path.expanduser("~/.claude.json")) as f:
        entry = json.load(f)["mcpServers"]["shofer"]
    env = dict(os.environ)
    env.update(entry.get("env") or {})
    params = StdioServerParameters(command=entry["command"], args=entry.get("args", []), env=env, cwd=project)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for name, command in steps:
                r = await session.call_tool("execute_command", {"command": command, "cwd": None, "timeout": None})
                text = "".join(c.text for c in r.content if getattr(c, "type", "") == "text")
                print(f"--- {name}\n{text}")
                if r.is_error or "Exit code: 0" not in text:
                    fail(f"{name} did not succeed through shofer serve")


if __name__ == "__main__":
    project = sys.argv[1]
    steps = [tuple(s.split("=", 1)) for s in sys.argv[2:]]
    asyncio.run(main(project, steps))
