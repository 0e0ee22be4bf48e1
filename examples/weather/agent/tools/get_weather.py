#!/usr/bin/env python3
"""Simulated weather for the weather example agent.

Reads one JSON request from stdin, {"input": {...}, "context": {...}}, and
prints one JSON result. The numbers are derived from a SHA-256 hash of the
lower-cased city name, so the same city always gets the same weather and tests
can assert exact values. Standard library only.

Set WEATHER_DELAY_MS to make the tool wait that many milliseconds before it
answers (tests use it to keep a call in flight).
"""

import hashlib
import json
import os
import sys
import time

CONDITIONS = ["sunny", "partly cloudy", "cloudy", "light rain", "heavy rain", "windy", "foggy", "snow"]
UNITS = ("celsius", "fahrenheit")


def fail(message):
    print(json.dumps({"content": message, "isError": True}))
    return 0


def main():
    delay = os.environ.get("WEATHER_DELAY_MS", "")
    if delay.strip():
        try:
            time.sleep(max(0, int(delay)) / 1000.0)
        except ValueError:
            pass

    try:
        request = json.load(sys.stdin)
    except ValueError as e:
        return fail(f"request is not valid JSON: {e}")
    if not isinstance(request, dict) or not isinstance(request.get("input"), dict):
        return fail("request must be an object with an `input` object")
    args = request["input"]

    city = args.get("city")
    if not isinstance(city, str) or not city.strip():
        return fail("`city` must be a non-empty string")
    city = city.strip()
    unit = args.get("unit", "celsius")
    if unit not in UNITS:
        return fail("`unit` must be \"celsius\" or \"fahrenheit\"")

    digest = hashlib.sha256(city.lower().encode("utf-8")).digest()
    celsius = digest[0] % 45 - 10
    result = {
        "city": city,
        "conditions": CONDITIONS[digest[1] % len(CONDITIONS)],
        "humidity": 20 + digest[2] % 76,
        "simulated": True,
    }
    if unit == "fahrenheit":
        result["temperatureF"] = round(celsius * 9 / 5 + 32)
        result["unit"] = "fahrenheit"
    else:
        result["temperatureC"] = celsius
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
