#!/usr/bin/env python3
"""Pretends to deploy: answers with the target it was given."""

import json
import sys

request = json.load(sys.stdin)
target = request.get("input", {}).get("target", "?")
print(json.dumps({"deployed": True, "target": target, "version": "1.4.2"}))
