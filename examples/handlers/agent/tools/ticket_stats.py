#!/usr/bin/env python3
"""Counts a customer's tickets in the agent's key-value store."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bdk_host import Host  # noqa: E402

request = json.load(sys.stdin)
customer = request["input"]["customer"]
keys = Host().call("kv.list", namespace="tickets", prefix=f"{customer}#")["keys"]
print(json.dumps({"customer": customer, "open": len(keys)}))
