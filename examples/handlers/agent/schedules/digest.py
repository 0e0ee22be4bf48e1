#!/usr/bin/env python3
"""Schedule handler: a digest for every customer with open tickets.

For each customer it counts the open tickets with the `ticket_stats` tool,
wakes the customer's conversation with the count, waits for the agent's
reply, keeps the reply in the key-value store and sets a reminder in the
conversation to follow up later.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bdk_host import Host  # noqa: E402

request = json.load(sys.stdin)
host = Host()
customers = host.call("kv.list", namespace="ticket-counters")["keys"]
sessions, replies, reminders = [], {}, {}
for customer in customers:
    stats = host.call("tools.call", tool="ticket_stats", input={"customer": customer})
    count = stats["result"]["open"]
    sent = host.call(
        "send",
        channel="support",
        key=customer,
        message=f"Daily digest: {count} open tickets.",
    )
    done = host.call("session.wait", sessionId=sent["sessionId"], timeoutMs=120000)
    if done["timedOut"]:
        print(json.dumps({"ok": False, "error": f"{customer}: no reply within two minutes"}))
        sys.exit(0)
    sessions.append(sent["sessionId"])
    replies[customer] = done["lastReply"]
    # Remind the conversation to follow up in two hours (a reminder of
    # that session: the schedule reaches it because nobody owns it).
    reminder = host.call(
        "reminders.create",
        sessionId=sent["sessionId"],
        delay="2h",
        prompt="Follow up on the open tickets.",
    )
    reminders[customer] = reminder["id"]
    host.call("kv.put", namespace="digests", key=customer, value={
        "at": request["firedAt"],
        "reply": done["lastReply"],
    })

print(json.dumps({"sessionIds": sessions, "replies": replies, "reminders": reminders}))
