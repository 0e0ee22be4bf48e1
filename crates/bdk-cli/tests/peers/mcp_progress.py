"""Asks a BDK agent over MCP with the official Python SDK while listening
for progress and log notifications.

Usage: mcp_progress.py <url of .../v1/mcp>

It sets the log level, calls `ask` with a progress callback, then calls
`ask` again without one, and prints one JSON object with the progress
messages, the log messages and both answers. Any protocol failure raises,
so the process exits non-zero.
"""

import asyncio
import contextlib
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


def structured(result):
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def main():
    progress = []
    logs = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": message})

    async def on_log(params):
        logs.append({"level": str(params.level), "logger": params.logger, "data": params.data})

    async with contextlib.AsyncExitStack() as stack:
        streams = await stack.enter_async_context(streamable_http_client(sys.argv[1]))
        session = await stack.enter_async_context(
            ClientSession(streams[0], streams[1], logging_callback=on_log)
        )
        await session.initialize()
        await session.set_logging_level("info")
        streamed = await session.call_tool(
            "ask", {"message": "What's the weather in Paris?"}, progress_callback=on_progress
        )
        heard = len(progress)
        quiet = await session.call_tool("ask", {"message": "What's the weather in Oslo?"})
    print(
        json.dumps(
            {
                "progress": progress,
                "logs": logs,
                "streamed": structured(streamed),
                "quiet": structured(quiet),
                "progressAfterQuiet": len(progress) - heard,
            }
        )
    )


asyncio.run(main())
