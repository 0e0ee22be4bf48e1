"""Asks a BDK agent over `bdk mcp` (stdio) with the official Python SDK,
answering its approval forms (elicitation).

Usage: mcp_elicit.py <bdk> <project dir> <state root> <approve|deny|dismiss>

It asks the agent to deploy; the agent's `deploy` tool needs approval, so
the server sends an elicitation form, which this client answers as told.
It prints one JSON object with the forms it saw and the answer to `ask`.
"""

import asyncio
import contextlib
import json
import sys

from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client


async def main():
    bdk, project, state, choice = sys.argv[1:5]
    forms = []

    async def on_form(context, params):
        forms.append({"message": params.message, "schema": params.requested_schema})
        if choice == "approve":
            return types.ElicitResult(action="accept", content={"approve": True, "reason": "looks right"})
        if choice == "deny":
            return types.ElicitResult(action="accept", content={"approve": False, "reason": "not today"})
        return types.ElicitResult(action="cancel")

    params = StdioServerParameters(
        command=bdk, args=["mcp", "--dir", project, "--state-root", state]
    )
    async with contextlib.AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(stdio_client(params))
        session = await stack.enter_async_context(
            ClientSession(read, write, elicitation_callback=on_form)
        )
        await session.initialize()
        wait = 3000 if choice == "dismiss" else 60000
        asked = await session.call_tool(
            "ask", {"message": "Please deploy to production", "waitMs": wait}
        )
        answer = asked.structured_content or json.loads(asked.content[0].text)
    print(json.dumps({"forms": forms, "ask": answer}))


asyncio.run(main())
