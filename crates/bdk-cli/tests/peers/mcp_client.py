"""Drives a BDK agent's MCP surface with the official Python MCP SDK.

Usage: mcp_client.py http <url>      (streamable HTTP, e.g. .../v1/mcp)
       mcp_client.py stdio <bdk> <project dir> <state root>   (`bdk mcp`)

It lists the tools, asks the weather question, checks the session and makes
a direct tool call; then it reads the agent's skill as a prompt and the
asked session's events as a resource (and completes its id), and prints
one JSON object with what it saw. Any protocol failure raises, so the
process exits non-zero.
"""

import asyncio
import contextlib
import json
import sys

import mcp.types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def structured(result):
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def exercise(session, direct_name):
    await session.initialize()
    listed = await session.list_tools()
    tools = {t.name: t for t in listed.tools}
    asked = await session.call_tool("ask", {"message": "What's the weather in Paris?"})
    answer = structured(asked)
    checked = await session.call_tool("check", {"sessionId": answer["sessionId"]})
    state = structured(checked)
    if direct_name == "call_tool":
        called = await session.call_tool(
            "call_tool", {"name": "get_weather", "input": {"city": "Lima"}}
        )
    else:
        called = await session.call_tool("get_weather", {"city": "Lima"})
    missing = await session.call_tool("check", {"sessionId": "ses_doesnotexist"})
    context = await read_context(session, answer["sessionId"])
    return {
        "context": context,
        "tools": sorted(tools),
        "readOnly": {
            name: bool(t.annotations and t.annotations.read_only_hint)
            for name, t in tools.items()
        },
        "ask": {"isError": bool(asked.is_error), **answer},
        "check": {"isError": bool(checked.is_error), **state},
        "direct": {"isError": bool(called.is_error), "value": structured(called)},
        "missing": {"isError": bool(missing.is_error), "text": missing.content[0].text},
    }


async def read_context(session, session_id):
    """Prompts, resources and completion, as issue 21 asks of the server."""
    prompts = await session.list_prompts()
    prompt = await session.get_prompt("forecast-style")
    listed = await session.list_resources()
    templates = await session.list_resource_templates()
    uri = f"bdk://sessions/{session_id}/events"
    read = await session.read_resource(uri)
    contents = read.contents[0]
    events = [json.loads(line) for line in contents.text.splitlines() if line.strip()]
    completed = await session.complete(
        types.ResourceTemplateReference(type="ref/resource", uri="bdk://sessions/{sessionId}/events"),
        {"name": "sessionId", "value": session_id[:6]},
    )
    return {
        "prompts": [p.name for p in prompts.prompts],
        "prompt": {
            "description": prompt.description,
            "role": prompt.messages[0].role,
            "text": prompt.messages[0].content.text,
        },
        "resources": [str(r.uri) for r in listed.resources],
        "templates": [t.uri_template for t in templates.resource_templates],
        "events": {
            "uri": str(contents.uri),
            "mimeType": contents.mime_type,
            "types": [e["type"] for e in events],
        },
        "completion": completed.completion.values,
    }


async def main():
    mode = sys.argv[1]
    async with contextlib.AsyncExitStack() as stack:
        if mode == "http":
            streams = await stack.enter_async_context(streamable_http_client(sys.argv[2]))
            direct_name = "call_tool"
        else:
            params = StdioServerParameters(
                command=sys.argv[2],
                args=["mcp", "--dir", sys.argv[3], "--state-root", sys.argv[4]],
            )
            streams = await stack.enter_async_context(stdio_client(params))
            direct_name = "get_weather"
        read, write = streams[0], streams[1]
        session = await stack.enter_async_context(ClientSession(read, write))
        report = await exercise(session, direct_name)
    print(json.dumps(report))


asyncio.run(main())
