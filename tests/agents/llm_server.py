#!/usr/bin/env python3
"""A scriptable OpenAI-compatible chat-completions server for the agent tests.

It is the test double at the process boundary between kclaw's agents and an
LLM endpoint. It listens on 127.0.0.1 only, on a free port that it writes to
--port-file once it accepts connections.

Control endpoints (used by the tests, never by kclaw):
  POST /_script  {"actions": [...]}  replaces the script and clears the log
  GET  /_log     the requests received since, as a JSON list

Each request to .../chat/completions consumes the next action:
  {"content": "text", "prompt_tokens": n, "completion_tokens": n}
                                 a normal reply with that message content
  {"status": 429, "headers": {"Retry-After": "1"}, "error": "slow down"}
                                 an error status with an OpenAI-style body
  {"raw": "{\"choices\": [", "status": 200}
                                 a verbatim body (truncated JSON, garbage)
  {"delay_s": 3, ...}            waits first (a hang past the client timeout)
  {"close": true}                drops the connection without a reply
When the script is exhausted the server answers 500 "script exhausted", so a
test that makes more calls than it scripted fails visibly.
"""
import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"actions": [], "log": [], "served": 0}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _send(self, status, body, headers=None):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def do_GET(self):
        if self.path == "/_log":
            with LOCK:
                self._send(200, json.dumps(STATE["log"]))
            return
        self._send(404, json.dumps({"error": {"message": "not found"}}))

    def do_POST(self):
        raw = self._body()
        if self.path == "/_script":
            with LOCK:
                STATE["actions"] = json.loads(raw)["actions"]
                STATE["log"] = []
                STATE["served"] = 0
            self._send(200, "{}")
            return
        if not self.path.endswith("/chat/completions"):
            self._send(404, json.dumps({"error": {"message": "no such path"}}))
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        with LOCK:
            STATE["log"].append({
                "path": self.path,
                "authorization": self.headers.get("Authorization"),
                "body": body,
            })
            n = STATE["served"]
            STATE["served"] += 1
            action = STATE["actions"][n] if n < len(STATE["actions"]) else None
        if action is None:
            self._send(500, json.dumps(
                {"error": {"message": "script exhausted"}}))
            return
        if action.get("delay_s"):
            time.sleep(action["delay_s"])
        if action.get("close"):
            self.close_connection = True
            self.connection.shutdown(2)
            return
        status = action.get("status", 200)
        headers = action.get("headers", {})
        if "raw" in action:
            self._send(status, action["raw"], headers)
            return
        if "error" in action:
            self._send(status, json.dumps(
                {"error": {"message": action["error"]}}), headers)
            return
        content = action.get("content", "")
        reply = {
            "id": "chatcmpl-test-%d" % n,
            "object": "chat.completion",
            "model": body.get("model") if isinstance(body, dict) else "",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": action.get("finish_reason", "stop"),
            }],
            "usage": {
                "prompt_tokens": action.get("prompt_tokens", 100 + n),
                "completion_tokens": action.get(
                    "completion_tokens", len(content) // 4),
            },
        }
        self._send(status, json.dumps(reply), headers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    args = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(tmp, args.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
