"""The raw-stdio MCP client the bench drivers share (scripts/bench-*.py): `codespace serve` over
newline-delimited JSON-RPC, no third-party Python packages. A driver imports it with its own
directory on sys.path (the drivers run as `python3 scripts/bench-x.py` from the repo root)."""

from __future__ import annotations

import json
import subprocess


class Server:
    """A server started with `argv` (e.g. `[binary, "serve", "--config", cfg]`), initialized as
    the client `client`; its stderr is dropped. `env`: the server's whole environment (default:
    this script's)."""

    def __init__(self, argv: list[str], client: str, env: dict[str, str] | None = None) -> None:
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, bufsize=1, env=env)
        self.next = 1
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": client, "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg: dict) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        """The result of one request; a JSON-RPC error raises RuntimeError."""
        i = self.next
        self.next += 1
        self.send({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
        assert self.p.stdout is not None
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("server closed stdout")
            msg = json.loads(line)
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(json.dumps(msg["error"]))
                return msg["result"]

    def tool(self, name: str, args: dict) -> dict:
        """A tool's structuredContent; a tool error raises RuntimeError with its text."""
        r = self.request("tools/call", {"name": name, "arguments": args})
        if r.get("isError"):
            raise RuntimeError(r["content"][0]["text"])
        return r["structuredContent"]

    def close(self, timeout: float = 60) -> None:
        """A clean shutdown (stdin closed; the server persists its path index)."""
        assert self.p.stdin is not None
        self.p.stdin.close()
        self.p.wait(timeout=timeout)
