"""The worked agent of agent.py, through the service's MCP endpoint with the
official `mcp` Python SDK, as an agent's MCP host would drive it.

    pip install './clients/python[mcp]'
    ANCHOR_BASE_URL=http://127.0.0.1:8080 python examples/mcp_agent.py

ANCHOR_MCP_MODE picks the protocol revision: `2026-07-28` (stateless: the
client discovers the server and sends its context with each request),
`legacy` (the `initialize` handshake of 2025-11-25 and before), or `auto`
(the default: discover, else fall back).

It registers, anchors each step before acting, confirms after, and reads the
declarations back; the token travels as each tool's `auth_token` argument.
With ANCHOR_SECOND_BASE_URL (another host of the same service), it confirms
and reads back there: any host answers any request.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys

try:
    from mcp import Client
except ImportError:
    sys.exit("this example needs the official MCP SDK: pip install './clients/python[mcp]'")

STEPS = [
    ("depend on the supplier's price list", "external_interaction", "depend"),
    ("approve the cheapest offer", "internal_service", "approve"),
    ("place the order", "external_interaction", "execute"),
]


def structured(result, tool: str) -> dict:
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.structured_content or result.content}")
    return result.structured_content


async def main() -> int:
    base = os.environ.get("ANCHOR_BASE_URL", "http://127.0.0.1:8080").rstrip("/")
    mode = os.environ.get("ANCHOR_MCP_MODE", "auto")
    second = os.environ.get("ANCHOR_SECOND_BASE_URL", "").rstrip("/")
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(Client(f"{base}/mcp", mode=mode))
        other = await stack.enter_async_context(Client(f"{second}/mcp", mode=mode)) if second else client
        return await run(client, other, bool(second))


async def run(client, other, two_hosts: bool) -> int:
    print(f"MCP protocol revision {client.protocol_version}")
    tools = {tool.name for tool in (await client.list_tools()).tools}
    assert {"register_agent", "create_decision", "confirm_decision", "list_decisions"} <= tools, tools
    agent = structured(await client.call_tool("register_agent", {}), "register_agent")
    token = agent["auth_token"]
    for step, decision_type, action in STEPS:
        created = structured(
            await client.call_tool(
                "create_decision",
                {
                    "auth_token": token,
                    "decision_type": decision_type,
                    "decision_action_type": action,
                    "origin_context_type": "external" if decision_type == "external_interaction" else "internal",
                    "ee_preset": "EE_basic",
                },
            ),
            "create_decision",
        )
        confirmed = structured(
            await other.call_tool("confirm_decision", {"auth_token": token, "dd_id": created["dd_id"]}), "confirm_decision"
        )
        print(f"{step}: {created['dd_id']} {confirmed['integrity_hash']}")
    listed = structured(await other.call_tool("list_decisions", {"auth_token": token, "limit": 10}), "list_decisions")
    print(f"{listed['total']} declarations anchored over MCP" + (", created on one host, confirmed on another" if two_hosts else ""))
    return 0 if listed["total"] == len(STEPS) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
