"""A small client for the bdk host endpoint (standard library only).

Tools and handlers find the endpoint in their environment: BDK_HOST_SOCKET
(a Unix socket) and BDK_HOST_TOKEN (a capability for this one run). The
protocol is JSON lines; see docs/tools.md and docs/handlers.md.
"""

import json
import os
import socket


class HostError(RuntimeError):
    def __init__(self, op, code, message):
        super().__init__(f"{op} failed: {code}: {message}")
        self.code = code


class Host:
    def __init__(self):
        self.token = os.environ["BDK_HOST_TOKEN"]
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(os.environ["BDK_HOST_SOCKET"])
        self.stream = conn.makefile("rwb")
        self.last_id = 0

    def call(self, op, **args):
        self.last_id += 1
        request = {"token": self.token, "id": self.last_id, "op": op, "args": args}
        self.stream.write(json.dumps(request).encode() + b"\n")
        self.stream.flush()
        answer = json.loads(self.stream.readline())
        if not answer["ok"]:
            raise HostError(op, answer["error"], answer["message"])
        return answer["result"]
