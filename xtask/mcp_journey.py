"""Drives Corral's MCP server with the official MCP Python SDK (PyPI `mcp`), over both
transports: stdio (`corral mcp`, started by the SDK) and streamable HTTP (`BASE_URL/mcp` with
the project API key as a bearer token).

On each: initialize, list tools, create a `local` sandbox, run a command, start a long one and
read its output incrementally (output seen while it still runs), write and read a file (text
and binary), a failing call answered as a tool error with its v3 code, delete.

Run by `cargo xtask mcp` as: CORRAL_API_KEY=crl_… mcp_journey.py CORRAL_BIN BASE_URL.
Exits non-zero on any mismatch.
"""

import asyncio
import base64
import os
import sys
import time

import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

corral_bin, base_url, key = sys.argv[1], sys.argv[2], os.environ["CORRAL_API_KEY"]

TOOLS = {
    "providers_list",
    "sandbox_create",
    "sandbox_list",
    "sandbox_get",
    "sandbox_stop",
    "sandbox_resume",
    "sandbox_fork",
    "sandbox_delete",
    "snapshot_create",
    "snapshot_list",
    "snapshot_delete",
    "command_run",
    "command_start",
    "command_output",
    "command_signal",
    "file_read",
    "file_write",
}


def expect(cond, what):
    if not cond:
        print(f"mcp journey: {what}", file=sys.stderr, flush=True)
        # Out at once: inside the SDK's task groups an exception would be wrapped and
        # reported as a traceback; the stdio server ends when its stdin closes.
        os._exit(1)


async def call(session, name, **arguments):
    result = await session.call_tool(name, arguments)
    expect(not result.is_error, f"{name} failed: {result.structured_content or result.content}")
    expect(result.structured_content is not None, f"{name} answered no structured content")
    return result.structured_content


async def journey(session, transport):
    init = await session.initialize()
    expect(init.server_info.name == "corral", f"{transport}: server is {init.server_info.name}")

    tools = await session.list_tools()
    names = {t.name for t in tools.tools}
    expect(names == TOOLS, f"{transport}: tools are {sorted(names)}")
    run_tool = next(t for t in tools.tools if t.name == "command_run")
    expect("command" in run_tool.input_schema.get("required", []), f"{transport}: command_run schema")

    providers = await call(session, "providers_list")
    expect(
        any(p["provider"] == "local" for p in providers["providers"]),
        f"{transport}: providers {providers}",
    )

    sandbox = (await call(session, "sandbox_create", provider="local"))["sandbox"]
    sid = sandbox["id"]
    deadline = time.monotonic() + 60
    while sandbox["status"] != "running":
        expect(time.monotonic() < deadline, f"{transport}: {sid} not running: {sandbox}")
        await asyncio.sleep(0.2)
        sandbox = (await call(session, "sandbox_get", sandboxId=sid))["sandbox"]

    ran = await call(
        session,
        "command_run",
        sandboxId=sid,
        command="echo out; echo err >&2; exit 3",
        timeoutSeconds=30,
    )
    expect(
        (ran["stdout"], ran["stderr"], ran["exitCode"]) == ("out\n", "err\n", 3),
        f"{transport}: command_run gave {ran}",
    )

    # A long command: each line is read before the command ends.
    started = await call(
        session,
        "command_start",
        sandboxId=sid,
        command="for i in 1 2 3; do echo tick $i; sleep 1; done",
    )
    cmd, cursor, seen = started["commandId"], started["cursor"], ""
    first_seen_running = False
    deadline = time.monotonic() + 30
    while True:
        expect(time.monotonic() < deadline, f"{transport}: the long command never ended: {seen!r}")
        page = await call(
            session, "command_output", sandboxId=sid, commandId=cmd, cursor=cursor, waitSeconds=5
        )
        expect(page["cursor"] >= cursor, f"{transport}: the cursor went back: {page}")
        cursor = page["cursor"]
        seen += page["stdout"]
        if "tick 1" in seen and not page["exited"] and not first_seen_running:
            first_seen_running = True
        if page["exited"]:
            expect(page.get("exitCode") == 0, f"{transport}: long command ended {page}")
            break
    expect(first_seen_running, f"{transport}: no output was seen before the command ended")
    expect(seen == "tick 1\ntick 2\ntick 3\n", f"{transport}: long command output {seen!r}")

    # A command stopped by a signal.
    sleeper = await call(session, "command_start", sandboxId=sid, command="sleep 60")
    await call(session, "command_signal", sandboxId=sid, commandId=sleeper["commandId"], signal="KILL")
    page = await call(
        session,
        "command_output",
        sandboxId=sid,
        commandId=sleeper["commandId"],
        cursor=0,
        waitSeconds=10,
    )
    expect(page["exited"] and page.get("state") == "killed", f"{transport}: signalled {page}")

    text = f"hello over {transport}\n"
    wrote = await call(session, "file_write", sandboxId=sid, path="/workspace/h.txt", content=text)
    expect(wrote["bytesWritten"] == len(text.encode()), f"{transport}: write gave {wrote}")
    read = await call(session, "file_read", sandboxId=sid, path="/workspace/h.txt")
    expect(read["content"] == text, f"{transport}: read gave {read}")

    blob = bytes(range(256))
    await call(
        session,
        "file_write",
        sandboxId=sid,
        path="/workspace/b.bin",
        content=base64.b64encode(blob).decode(),
        encoding="base64",
    )
    read = await call(session, "file_read", sandboxId=sid, path="/workspace/b.bin", encoding="base64")
    expect(base64.b64decode(read["content"]) == blob, f"{transport}: binary read gave {read}")

    # A failure is a tool error the agent reads, with the v3 code.
    missing = await session.call_tool(
        "file_read", {"sandboxId": sid, "path": "/workspace/absent.txt"}
    )
    expect(missing.is_error, f"{transport}: reading a missing file succeeded: {missing}")
    code = (missing.structured_content or {}).get("error", {}).get("code")
    expect(code == "file_operation_failed", f"{transport}: missing file gave {missing.structured_content}")

    listed = await call(session, "sandbox_list", limit=100)
    expect(any(s["id"] == sid for s in listed["sandboxes"]), f"{transport}: list gave {listed}")

    gone = (await call(session, "sandbox_delete", sandboxId=sid))["sandbox"]
    expect(gone["status"] == "deleted", f"{transport}: delete gave {gone}")
    gone = await session.call_tool("command_run", {"sandboxId": sid, "command": "true"})
    code = (gone.structured_content or {}).get("error", {}).get("code")
    expect(gone.is_error and code is not None, f"{transport}: exec after delete gave {gone}")
    print(f"mcp journey ({transport}): every tool on {sid} passed (after delete: {code})")


async def over_stdio():
    params = StdioServerParameters(
        command=corral_bin,
        args=["mcp"],
        env={"CORRAL_URL": base_url, "CORRAL_API_KEY": key, "CORRAL_LOG": "warn"},
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await journey(session, "stdio")


async def over_http():
    # Without a key, and with a wrong one, `/mcp` refuses like the API.
    async with httpx2.AsyncClient() as raw:
        hello = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "journey", "version": "0"},
            },
        }
        headers = {"accept": "application/json, text/event-stream"}
        refused = await raw.post(f"{base_url}/mcp", json=hello, headers=headers)
        expect(refused.status_code == 401, f"no key: {refused.status_code} {refused.text}")
        expect(refused.json()["error"]["code"] == "missing_api_key", f"no key: {refused.text}")
        wrong = await raw.post(
            f"{base_url}/mcp",
            json=hello,
            headers={**headers, "authorization": "Bearer crl_nope_nope"},
        )
        expect(wrong.status_code == 401, f"wrong key: {wrong.status_code} {wrong.text}")
    client = httpx2.AsyncClient(
        headers={"authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=120)
    )
    async with client:
        async with streamable_http_client(f"{base_url}/mcp", http_client=client) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await journey(session, "streamable HTTP")


asyncio.run(over_stdio())
asyncio.run(over_http())
print("mcp journey: 2 passed, 0 failed")
