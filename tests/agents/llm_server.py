#!/usr/bin/env python3
"""A scriptable OpenAI-compatible chat-completions server for the agent tests.

It is the test double at the process boundary between kclaw's agents and an
LLM endpoint. It listens on 127.0.0.1 only, on a free port that it writes to
--port-file once it accepts connections.

It emulates the providers kclaw talks to in the ways that matter to the
client: OpenAI reasoning models refusing parameters, reasoning in separate
fields or inline, truncation, usage with reasoning and cached tokens,
Azure's URL shape and key header, vLLM's and Ollama's model information.

Control endpoints (used by the tests, never by kclaw):
  POST /_script  {"actions": [...], ...}  replaces the script and clears
                 the log; besides the actions it may set the server's
                 behaviour (each reset by the next script):
                   "refuse": {"max_tokens": "message", ...}
                       a chat request that carries one of these parameters
                       is answered 400 with an OpenAI-style error naming it
                       (message, type, param, code), as OpenAI's reasoning
                       models do; it consumes no action
                   "refuse_param_field": false
                       leave error.param out (only the message names it)
                   "models": [{"id": "m", "max_model_len": 4096}, ...]
                       GET .../models answers {"data": models} (vLLM);
                       without it, 404
                   "model_info": {"llama.context_length": 8192}
                       POST /api/show answers {"model_info": ...} (Ollama)
  GET  /_log     the requests received since, as a JSON list: path (without
                 the query), query, authorization and api-key headers, body

Each request to .../chat/completions (any query string) consumes the next
action:
  {"content": "text", "prompt_tokens": n, "completion_tokens": n}
                                 a normal reply with that message content;
                                 "content": null sends a null content
  {"reasoning_content": "...", "reasoning": "...", "finish_reason": "length",
   "usage": {...}}               extra message fields, the finish reason, and
                                 a usage object sent as given
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
STATE = {"actions": [], "log": [], "served": 0, "opts": {}}


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
        with LOCK:
            models = STATE["opts"].get("models")
        if self.path.split("?")[0].endswith("/models") and models is not None:
            self._send(200, json.dumps({"object": "list", "data": models}))
            return
        self._send(404, json.dumps({"error": {"message": "not found"}}))

    def _refusal(self, body):
        """The 400 of a model that does not take a parameter, or None."""
        with LOCK:
            refuse = STATE["opts"].get("refuse") or {}
            with_param = STATE["opts"].get("refuse_param_field", True)
        if not isinstance(body, dict):
            return None
        for name, message in refuse.items():
            if name in body:
                err = {"message": message, "type": "invalid_request_error",
                       "code": "unsupported_parameter"}
                if with_param:
                    err["param"] = name
                return json.dumps({"error": err})
        return None

    def do_POST(self):
        raw = self._body()
        path, _, query = self.path.partition("?")
        if path == "/_script":
            with LOCK:
                script = json.loads(raw)
                STATE["actions"] = script.pop("actions")
                STATE["opts"] = script
                STATE["log"] = []
                STATE["served"] = 0
            self._send(200, "{}")
            return
        if path.endswith("/api/show"):
            with LOCK:
                info = STATE["opts"].get("model_info")
            if info is None:
                self._send(404, json.dumps({"error": "model not found"}))
            else:
                self._send(200, json.dumps({"model_info": info}))
            return
        if not path.endswith("/chat/completions"):
            self._send(404, json.dumps({"error": {"message": "no such path"}}))
            return
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        with LOCK:
            STATE["log"].append({
                "path": path,
                "query": query,
                "authorization": self.headers.get("Authorization"),
                "api-key": self.headers.get("api-key"),
                "body": body,
            })
        refusal = self._refusal(body)
        if refusal is not None:
            self._send(400, refusal)
            return
        with LOCK:
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
        message = {"role": "assistant", "content": content}
        for k in ("reasoning_content", "reasoning"):
            if k in action:
                message[k] = action[k]
        reply = {
            "id": "chatcmpl-test-%d" % n,
            "object": "chat.completion",
            "model": body.get("model") if isinstance(body, dict) else "",
            "choices": [{
                "index": 0,
                "message": message,
                "finish_reason": action.get("finish_reason", "stop"),
            }],
            "usage": action.get("usage", {
                "prompt_tokens": action.get("prompt_tokens", 100 + n),
                "completion_tokens": action.get(
                    "completion_tokens", len(content or "") // 4),
            }),
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
