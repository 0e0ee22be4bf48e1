"""The `signed` result gate: one JSON request on stdin, one verdict on stdout.

The request carries the reply, the attempt number, the turn's events and the
session; the answer is {"verdict": "accept" | "reject" | "fail", ...}.
"""

import json
import sys

SIGNATURE = "-- the release bot"

request = json.loads(sys.stdin.readline())
reply = request["reply"].rstrip()

if "(unreleased)" in reply:
    verdict = {
        "verdict": "fail",
        "message": "the notes name an unreleased feature; nothing was published",
    }
elif not reply.endswith(SIGNATURE):
    verdict = {
        "verdict": "reject",
        "feedback": f"End the reply with the signature line `{SIGNATURE}`.",
    }
else:
    tools = [
        e["data"]["name"]
        for e in request["events"]
        if e["type"] == "action.result"
    ]
    # A gate that publishes the reply would do it here, unless the session is
    # a dry run (the host endpoint refuses writes then anyway).
    verdict = {
        "verdict": "accept",
        "action": {
            "checked": "signature",
            "attempt": request["attempt"],
            "toolsUsed": tools,
            "dryRun": request["session"]["dryRun"],
        },
    }

print(json.dumps(verdict))
