#!/usr/bin/env python3
"""Pretends to check a service: the same answer for the same name."""

import json
import sys

request = json.load(sys.stdin)
service = request.get("input", {}).get("service", "?").strip().lower()
degraded = service in ("checkout", "payments")
print(json.dumps({
    "service": service,
    "status": "degraded" if degraded else "up",
    "errorRate": 0.07 if degraded else 0.0,
}))
