"""A small OpenAI-compatible completions server on a free loopback port, for the openai backend's tests.

It answers ``POST /v1/completions`` with token-id prompts the way ``vllm serve`` does (``token_ids``,
``logprobs.token_logprobs``, ``tokens`` as ``token_id:N``), generating with an in-process backend. Modes
break it on purpose: ``malformed`` (a 200 answer that is not JSON), ``slow`` (answers after ``delay`` s),
and ``fail_after`` (the first N requests succeed, every later one gets HTTP 503).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from creditflow.policy.backends.base import SamplingParams


class FakeCompletionsServer:
    def __init__(self, backend=None, mode: str = "ok", delay: float = 0.0, fail_after: int | None = None):
        self.backend = backend
        self.mode = mode
        self.delay = delay
        self.fail_after = fail_after
        self.requests = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests += 1
                    n = server.requests
                if server.mode == "slow":
                    time.sleep(server.delay)
                if server.mode == "malformed":
                    return self._send(200, b"{not json")
                if server.fail_after is not None and n > server.fail_after:
                    return self._send(503, b'{"error": {"message": "overloaded"}}')
                with server._lock:  # one generation at a time (the backend is not thread-safe)
                    answer = server.complete(body)
                self._send(200, json.dumps(answer).encode())

            def _send(self, status: int, payload: bytes):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, address: None  # a client that gave up (time-out tests)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def complete(self, body: dict) -> dict:
        eos = self.backend.tokenizer.eos_token_id
        params = SamplingParams(max_new_tokens=body["max_tokens"], temperature=body["temperature"],
                                top_p=body["top_p"], stop_token_ids=[t for t in body["stop_token_ids"] if t != eos])
        outs = self.backend.generate(body["prompt"], params)
        return {"id": "cmpl-fake", "object": "text_completion", "created": 0, "model": body["model"],
                "choices": [{"index": i, "text": o.text, "finish_reason": "stop", "token_ids": o.token_ids,
                             "logprobs": {"token_logprobs": o.logprobs, "tokens": [f"token_id:{t}" for t in o.token_ids],
                                          "text_offset": [0] * len(o.token_ids), "top_logprobs": None}}
                            for i, o in enumerate(outs)]}

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
