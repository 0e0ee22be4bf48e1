#!/usr/bin/env python3
"""Route handler for POST /v1/channels/support/tickets.

Numbers the ticket per customer (in the agent's key-value store), hands it
to the customer's conversation, and answers the form with its own body.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bdk_host import Host  # noqa: E402

request = json.load(sys.stdin)
body = request["body"]
customer = body["customer"]
host = Host()

# One counter per customer; the handler is the only writer.
seen = host.call("kv.get", namespace="ticket-counters", key=customer)
number = (seen["value"] if seen["found"] else 0) + 1
host.call("kv.put", namespace="ticket-counters", key=customer, value=number)
host.call("kv.put", namespace="tickets", key=f"{customer}#{number:06d}", value=body["text"])

print(json.dumps({
    "status": 201,
    "headers": {"x-ticket-number": str(number)},
    "body": {
        "ticket": number,
        "customer": customer,
        "conversation": f"support:{customer}",
        "requestId": request["headers"].get("x-request-id"),
    },
    "deliver": {
        "key": customer,
        "message": f"Ticket #{number} from {customer}: {body['text']}",
        "admission": "coalesce",
    },
}))
