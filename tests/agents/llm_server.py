#!/usr/bin/env python3
"""A scriptable OpenAI-compatible chat-completions server for the agent tests.

It is the test double at the process boundary between kclaw's agents and an
LLM endpoint. It listens on 127.0.0.1 only, on a free port that it writes to
--port-file once it accepts connections; --latency S makes every chat reply
take S seconds more, as a real model's does (tools/bench/
parallel_candidates.sh).

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
                   "model": {"recordings": DIR, "faults": [...],
                             "cycle": false}
                       the model-like mode (below) instead of the actions;
                       with "cycle", a job past the recordings gets the
                       recording of its number modulo their count (a
                       stand-in model that never runs out of replies)
  GET  /_log     the requests received since, as a JSON list: path (without
                 the query), query, authorization and api-key headers, body
  GET  /_model   the model-like mode's answers since the script: {"served":
                 [{"task", "role", "job", "try", "status", "fault",
                 "prompt_tokens", "completion_tokens", "reasoning_tokens",
                 "cached_tokens", "prefix_share"}, ...]}, in the order they
                 were sent

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
  {"ollama_cut": 2048, "content": "text"}
                                 a reply as Ollama's /v1 gives one for a
                                 prompt longer than its context: usage
                                 prompt_tokens = min(the messages'
                                 characters / 4, the cut), and
                                 system_fingerprint "fp_ollama"
When the script is exhausted the server answers 500 "script exhausted", so a
test that makes more calls than it scripted fails visibly.

POST .../v1/messages is Anthropic's Messages API (_anthropic): a request
without the x-api-key header (or with another key than the script's
"anthropic_key") is answered 401 authentication_error, one without
anthropic-version or max_tokens, or with a "system" role among its
messages, 400 invalid_request_error. It consumes the next action as above,
read the Messages way:
  {"content": "text", "thinking": "...", "redacted_thinking": "data",
   "stop_reason": "max_tokens", "usage": {...}}
                                 content blocks: the thinking ones first,
                                 then the text; stop_reason (end_turn by
                                 default); usage as given, else counted
  {"status": 429, "headers": {"retry-after": "1"}, "error": "...",
   "error_type": "rate_limit_error"}
                                 an Anthropic-style error body (529:
                                 overloaded_error)
Counted usage emulates the prompt cache: each block with cache_control
ends a prefix (the system blocks, then the messages' blocks, in order);
a prefix the server has seen is read from the cache
(cache_read_input_tokens), a new one written (cache_creation_input_tokens),
the rest is input_tokens; tokens are characters / 4. The cache lives as
long as the server.

The model-like mode ("model" in the script; tests/mainjob/live_test.sh)
answers a whole deployment's agents, however their calls interleave, the
way a model would: each request is told apart by its prompt (the role from
the system message's "You are the <Role title> of kclaw", the task from the
user message's "# Task: <name>"), and the n-th job of that role and task
gets the reply text DIR/<task>/<role>/<n>.txt (e.g. examples/recordings).
A request repeats the job whose last answer was a fault (an HTTP retry, a
re-ask after a malformed or cut-off reply), and so does one that goes on
a conversation (more than two messages: the Planner asked again by binding
screening, which gets the same reply); otherwise it starts the next
job. A Generator prompt that names its seed ("## Your seed: i of k") is
job i - 1, so seed i gets the reply i - 1 whatever the order of the
concurrent calls; one that names none takes the next job. Faults:
  {"task": T, "role": R, "job": n, "try": k, "name": N, "action": ACTION}
answers try k (0: the first request) of that job with ACTION instead:
  an action of the list above (a 429 with Retry-After, a 5xx, a raw body,
  content that is not a usable reply, ...): a fault, the job is asked again
  {"truncate": 0.5}    the reply cut at half its length, finish_reason
                       "length" (a fault)
  {"think": "text", "open": true}
                       the reply after "<think>text</think>" ("open": false
                       leaves the opening tag out, as a chat template that
                       opened it does): an answer, not a fault
  {"reasoning_content": "text"} the reply with that field: an answer
Every answer's usage is counted from the request: prompt_tokens = the
messages' characters / 4, completion_tokens = the content's / 4 plus the
reasoning's, reasoning_tokens = the reasoning's / 4, cached_tokens = the
characters the messages share from their start with the previous request
of the same task and role, / 4 (a provider's prefix cache; /_model's
prefix_share is that share of the prompt).
"""
import argparse
import glob
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"actions": [], "log": [], "served": 0, "opts": {}, "model": {},
         "model_log": []}


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
        if self.path == "/_model":
            with LOCK:
                self._send(200, json.dumps({"served": STATE["model_log"]}))
            return
        if self.path.split("?")[0].endswith("/models") and self._models():
            return
        self._send(404, json.dumps({"error": {"message": "not found"}}))

    def _models(self):
        """GET .../models: the scripted list; with a scripted "key", a
        request without it (Bearer or x-api-key) gets a 401. False when no
        list is scripted."""
        with LOCK:
            models = STATE["opts"].get("models")
            key = STATE["opts"].get("key")
        if models is None:
            return False
        if key is not None and \
                self.headers.get("Authorization") != "Bearer " + key and \
                self.headers.get("x-api-key") != key:
            self._send(401, json.dumps({"error": {
                "message": "Incorrect API key provided",
                "type": "invalid_request_error"}}))
            return True
        self._send(200, json.dumps({"object": "list", "data": models}))
        return True

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
                STATE["model"] = {}
                STATE["model_log"] = []
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
        if path.endswith("/v1/messages"):
            self._anthropic(raw)
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
            model = STATE["opts"].get("model")
        if LATENCY_S > 0:
            time.sleep(LATENCY_S)
        if model is not None:
            self._model_reply(model, body)
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
        if "ollama_cut" in action:
            self._ollama_cut(action, body, n)
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

    # ------------------------------------------------ Ollama's silent cut

    def _ollama_cut(self, action, body, n):
        msgs = body.get("messages") if isinstance(body, dict) else []
        chars = sum(len(m.get("content") or "") for m in msgs or []
                    if isinstance(m, dict))
        prompt = min(chars // 4, int(action["ollama_cut"]))
        content = action.get("content", "")
        self._send(200, json.dumps({
            "id": "chatcmpl-%d" % (100 + n), "object": "chat.completion",
            "model": body.get("model"), "system_fingerprint": "fp_ollama",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant",
                                     "content": content}}],
            "usage": {"prompt_tokens": prompt,
                      "completion_tokens": len(content) // 4,
                      "total_tokens": prompt + len(content) // 4}}))

    # ------------------------------------------- Anthropic's Messages API

    def _anthropic_error(self, status, etype, message, headers=None):
        self._send(status, json.dumps({"type": "error", "error": {
            "type": etype, "message": message}}), headers)

    def _anthropic_usage(self, body):
        """Counted usage with the emulated prompt cache."""
        blocks = []
        system = body.get("system")
        if isinstance(system, str):
            blocks.append({"text": system})
        elif isinstance(system, list):
            blocks.extend(system)
        for m in body.get("messages", []):
            c = m.get("content")
            if isinstance(c, str):
                blocks.append({"text": c})
            elif isinstance(c, list):
                blocks.extend(c)
        total, prefix, cached_upto, written = 0, "", 0, 0
        for b in blocks:
            text = b.get("text") or ""
            total += len(text)
            prefix += "\x00" + text
            if b.get("cache_control", {}).get("type") == "ephemeral":
                with LOCK:
                    seen = prefix in ANTHROPIC_CACHE
                    ANTHROPIC_CACHE.add(prefix)
                if seen:
                    cached_upto = total
                    written = 0
                else:
                    written = total - cached_upto
        read = cached_upto // 4
        written //= 4
        return {"input_tokens": total // 4 - read - written,
                "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read}

    def _anthropic(self, raw):
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        with LOCK:
            STATE["log"].append({
                "path": self.path.partition("?")[0],
                "query": self.path.partition("?")[2],
                "authorization": self.headers.get("Authorization"),
                "x-api-key": self.headers.get("x-api-key"),
                "anthropic-version": self.headers.get("anthropic-version"),
                "body": body,
            })
            want = STATE["opts"].get("anthropic_key")
        key = self.headers.get("x-api-key")
        if not key or (want is not None and key != want):
            self._anthropic_error(401, "authentication_error",
                                  "invalid x-api-key")
            return
        if not self.headers.get("anthropic-version"):
            self._anthropic_error(400, "invalid_request_error",
                                  "anthropic-version: header is required")
            return
        if not isinstance(body, dict) or "max_tokens" not in body:
            self._anthropic_error(400, "invalid_request_error",
                                  "max_tokens: Field required")
            return
        for m in body.get("messages", []):
            if m.get("role") not in ("user", "assistant"):
                self._anthropic_error(
                    400, "invalid_request_error",
                    "messages: Unexpected role \"%s\". The Messages API "
                    "accepts a top-level `system` parameter, not "
                    "\"system\" as an input message role." % m.get("role"))
                return
        with LOCK:
            n = STATE["served"]
            STATE["served"] += 1
            action = STATE["actions"][n] if n < len(STATE["actions"]) else None
        if action is None:
            self._anthropic_error(500, "api_error", "script exhausted")
            return
        if action.get("delay_s"):
            time.sleep(action["delay_s"])
        status = action.get("status", 200)
        headers = action.get("headers", {})
        if "error" in action or status != 200:
            self._anthropic_error(
                status, action.get("error_type",
                                   "overloaded_error" if status == 529
                                   else "rate_limit_error" if status == 429
                                   else "api_error"),
                action.get("error", "scripted failure"), headers)
            return
        content = []
        if "thinking" in action:
            content.append({"type": "thinking", "thinking": action["thinking"],
                            "signature": "sig-test"})
        if "redacted_thinking" in action:
            content.append({"type": "redacted_thinking",
                            "data": action["redacted_thinking"]})
        text = action.get("content", "")
        content.append({"type": "text", "text": text})
        usage = action.get("usage") or self._anthropic_usage(body)
        usage.setdefault("output_tokens", len(text) // 4)
        self._send(200, json.dumps({
            "id": "msg_test_%d" % n, "type": "message", "role": "assistant",
            "model": body.get("model"), "content": content,
            "stop_reason": action.get("stop_reason", "end_turn"),
            "stop_sequence": None, "usage": usage}), headers)

    # ------------------------------------------------- the model-like mode

    def _model_job(self, body):
        """(task, role, first two messages' characters, all characters) of
        a chat request, or None when it is not an agent's."""
        msgs = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(msgs, list) or len(msgs) < 2:
            return None
        texts = [m.get("content") or "" for m in msgs
                 if isinstance(m, dict)]
        m_role = re.search(r"You are the (.+?) of kclaw", texts[0])
        m_task = re.match(r"# Task: (\S+)", texts[1])
        if not m_role or not m_task:
            return None
        role = ROLE_TITLES.get(m_role.group(1), m_role.group(1).lower())
        return (m_task.group(1), role, len(texts[0]) + len(texts[1]),
                sum(map(len, texts)), len(msgs))

    def _model_reply(self, model, body):
        job = self._model_job(body)
        if job is None:
            self._send(400, json.dumps({"error": {
                "message": "not an agent's request (no role or task)"}}))
            return
        task, role, head, chars, nmsgs = job
        prompt = "".join(m.get("content") or "" for m in body["messages"]
                         if isinstance(m, dict))
        with LOCK:
            st = STATE["model"].setdefault((task, role),
                                           {"next": 0, "pending": None,
                                            "tries": {}, "last": None})
            seed = SEED_RE.search(body["messages"][1].get("content") or "")
            if seed is not None and role == "generator":
                # A seed's job is the seed the prompt names, however the
                # concurrent Generator calls arrive: seed i gets i.txt.
                n = int(seed.group(1)) - 1
                st["next"] = max(st["next"], n + 1)
            elif st["pending"] is not None:
                n = st["pending"]
            elif nmsgs > 2 and st["last"] is not None:
                # A conversation that goes on (the Planner asked again
                # by screening): the same job, answered the same way.
                n = st["last"]
            else:
                n = st["next"]
                st["next"] += 1
            k = st["tries"].get(n, 0)
            st["tries"][n] = k + 1
            action, name = None, None
            for f in model.get("faults", []):
                if (f.get("task"), f.get("role"), f.get("job", 0),
                        f.get("try", 0)) == (task, role, n, k):
                    action = f.get("action", {})
                    name = f.get("name", "fault")
            answer = action is None or "think" in action or \
                "reasoning_content" in action
            st["pending"] = None if answer else n
            st["last"] = n
        entry = {"task": task, "role": role, "job": n, "try": k,
                 "fault": name, "status": 200,
                 "prompt_tokens": 0, "completion_tokens": 0,
                 "reasoning_tokens": 0, "cached_tokens": 0}
        path = os.path.join(model["recordings"], task, role, "%d.txt" % n)
        if model.get("cycle") and not os.path.exists(path):
            # A stand-in that answers for ever: past its recordings, the
            # n-th job gets the recording n modulo their number.
            have = sorted(glob.glob(os.path.join(
                model["recordings"], task, role, "*.txt")))
            if have:
                path = os.path.join(model["recordings"], task, role,
                                    "%d.txt" % (n % len(have)))
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            text = None
        if text is None and (action is None or answer):
            entry["status"] = 500
            self._model_log(entry)
            self._send(500, json.dumps({"error": {
                "message": "no scripted reply %s/%s/%d" % (task, role, n)}}))
            return
        reasoning = ""
        message = {"role": "assistant", "content": text}
        finish = "stop"
        if action is not None and not answer:
            if "truncate" in action:
                message["content"] = text[:int(len(text) *
                                               action["truncate"])]
                finish = "length"
            else:
                status = action.get("status", 200)
                entry["status"] = status
                if "raw" in action or "error" in action or status != 200 or \
                        action.get("close"):
                    self._model_log(entry)
                    if action.get("delay_s"):
                        time.sleep(action["delay_s"])
                    if action.get("close"):
                        self.close_connection = True
                        self.connection.shutdown(2)
                    elif "raw" in action:
                        self._send(status, action["raw"],
                                   action.get("headers", {}))
                    else:
                        self._send(status, json.dumps({"error": {
                            "message": action.get("error", "error")}}),
                            action.get("headers", {}))
                    return
                message["content"] = action.get("content", "")
        elif action is not None and "think" in action:
            reasoning = action["think"]
            message["content"] = ("<think>" if action.get("open", True)
                                  else "") + reasoning + "</think>\n\n" + \
                text
        elif action is not None:
            reasoning = action["reasoning_content"]
            message["reasoning_content"] = reasoning
        content = message["content"] or ""
        entry["prompt_tokens"] = chars // 4
        entry["reasoning_tokens"] = len(reasoning) // 4
        entry["completion_tokens"] = len(content) // 4 + (
            0 if "think" in (action or {}) else len(reasoning) // 4)
        # A provider's prompt cache: the bytes this request shares from
        # its start with the previous request of the same task and role
        # are served from the cache.
        with LOCK:
            prev = STATE["model"][(task, role)].get("prompt")
            STATE["model"][(task, role)]["prompt"] = prompt
        same = prefix_len(prev or "", prompt)
        entry["prefix_share"] = same / len(prompt) if prompt else 0
        entry["cached_tokens"] = same // 4
        self._model_log(entry)
        usage = {"prompt_tokens": entry["prompt_tokens"],
                 "completion_tokens": entry["completion_tokens"],
                 "total_tokens": entry["prompt_tokens"] +
                 entry["completion_tokens"],
                 "completion_tokens_details": {
                     "reasoning_tokens": entry["reasoning_tokens"]},
                 "prompt_tokens_details": {
                     "cached_tokens": entry["cached_tokens"]}}
        self._send(200, json.dumps({
            "id": "chatcmpl-model-%s-%s-%d-%d" % (task, role, n, k),
            "object": "chat.completion", "model": body.get("model"),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": finish}],
            "usage": usage}))

    def _model_log(self, entry):
        with LOCK:
            STATE["model_log"].append(entry)


ANTHROPIC_CACHE = set()


def prefix_len(a, b):
    """The length of the longest common prefix of a and b."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


SEED_RE = re.compile(r"^## Your seed: (\d+) of \d+$", re.M)

ROLE_TITLES = {"Generator": "generator", "Feature Extractor": "feature",
               "Planner": "planner", "Optimizer": "optimizer",
               "Diagnoser": "diagnoser", "Repairer": "repairer"}


LATENCY_S = 0.0


def main():
    global LATENCY_S
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--port", type=int, default=0,
                    help="listen on this port (default: a free one); an "
                    "emulator started again on its old port stands for a "
                    "provider that was down")
    ap.add_argument("--latency", type=float, default=0.0,
                    help="seconds every chat reply takes (a model's "
                    "latency), on top of any scripted delay")
    args = ap.parse_args()
    LATENCY_S = args.latency
    ThreadingHTTPServer.allow_reuse_address = True
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
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
