"""Test utilities for users of the library: a scripted OpenAI-compatible chat server on loopback.

This module is for *tests and benchmarks*, not for training: it serves canned replies, so a user can
script an HTTP teacher (successes, timeouts, HTTP errors, malformed judgments) and test their own
Cliff set-up without a model. It is not imported by any trainer or teacher.

Standard library only (``http.server`` in a daemon thread, one thread per request), so it starts
in milliseconds and needs no model. A *responder* decides each reply, which lets tests script
successes, slow answers (timeouts), HTTP errors followed by success (retries) and malformed output,
while the server records every request and the highest number of requests in flight.

>>> with LoopbackChatServer(lambda request, index: Reply(content="hi")) as server:
...     import json, urllib.request
...     body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode()
...     answer = urllib.request.urlopen(urllib.request.Request(server.base_url + "/chat/completions", body))
...     json.loads(answer.read())["choices"][0]["message"]["content"]
'hi'
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FixedReply", "LoopbackChatServer", "Reply", "chat_completion_body", "serve_in_subprocess"]


@dataclass
class Reply:
    """One scripted reply: HTTP ``status``, the assistant ``content`` (wrapped in a chat-completion
    body) or a verbatim ``raw_body``, after ``delay`` seconds; with ``trickle`` > 0 the body is sent
    one byte every ``trickle`` seconds (a stalled-but-alive endpoint); extra response ``headers``."""

    content: str = ""
    status: int = 200
    delay: float = 0.0
    raw_body: str | None = None
    trickle: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    usage: dict[str, int] | None = None
    """``{"prompt_tokens": P, "completion_tokens": C}`` reported in the body's ``usage`` (None: zeros)."""


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    index: int
    started: float = field(default_factory=time.perf_counter)


def chat_completion_body(
    content: str, model: str = "loopback", usage: dict[str, int] | None = None
) -> dict[str, Any]:
    """A minimal OpenAI chat-completion response body holding ``content`` and ``usage`` (token counts, zeros
    when None)."""
    prompt_tokens = int((usage or {}).get("prompt_tokens", 0))
    completion_tokens = int((usage or {}).get("completion_tokens", 0))
    return {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class _Server(ThreadingHTTPServer):
    # the default listen backlog (5) drops bursts of concurrent connects, and a dropped SYN costs a
    # 1 s retransmit on the client: far more than the latencies benchmarked here
    request_queue_size = 256


Responder = Callable[[dict[str, Any], int], Reply]


class LoopbackChatServer:
    """``POST /v1/chat/completions`` on ``127.0.0.1`` (free port), answered by ``responder(body, index)``.

    Attributes (read after requests): ``requests`` (every request, in arrival order), ``max_in_flight``.
    Use as a context manager; ``base_url`` ends in ``/v1``.
    """

    def __init__(self, responder: Responder):
        self.responder = responder
        self.requests: list[RecordedRequest] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="loopback-chat",
            daemon=True,
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> LoopbackChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # headers and body go out as two writes: without TCP_NODELAY, Nagle's algorithm and
                # the client's delayed ACK add ~40 ms to every reply
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:  # silence the per-request stderr lines
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                try:
                    body = json.loads(self.rfile.read(length) or b"null")
                except json.JSONDecodeError:
                    body = None
                with server._lock:
                    index = len(server.requests)
                    server.requests.append(
                        RecordedRequest(self.path, dict(self.headers.items()), body, index)
                    )
                    server._in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server._in_flight)
                try:
                    if self.path.rstrip("/") != "/v1/chat/completions":
                        reply = Reply(status=404, raw_body='{"error": "not found"}')
                    else:
                        reply = server.responder(body if isinstance(body, dict) else {}, index)
                    if reply.delay:
                        time.sleep(reply.delay)
                    payload = (
                        reply.raw_body
                        if reply.raw_body is not None
                        else json.dumps(
                            chat_completion_body(
                                reply.content, (body or {}).get("model", "loopback"), reply.usage
                            )
                        )
                    )
                    data = payload.encode()
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    if reply.trickle > 0:
                        for offset in range(len(data)):
                            self.wfile.write(data[offset : offset + 1])
                            self.wfile.flush()
                            time.sleep(reply.trickle)
                    else:
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to answer
                finally:
                    with server._lock:
                        server._in_flight -= 1

        return Handler


@dataclass
class FixedReply:
    """A picklable responder giving every request the same ``content`` after ``delay`` seconds."""

    content: str
    delay: float = 0.0

    def __call__(self, body: dict[str, Any], index: int) -> Reply:
        return Reply(content=self.content, delay=self.delay)


def _serve_until_stopped(responder: Responder, urls: Any, stop: Any) -> None:
    with LoopbackChatServer(responder) as server:
        urls.put(server.base_url)
        stop.wait()
        urls.put(server.max_in_flight)


class serve_in_subprocess:
    """Run a :class:`LoopbackChatServer` in a separate process (no GIL shared with the client under
    test, as with a real teacher endpoint). A context manager yielding the base URL; after exit,
    ``max_in_flight`` holds the server's peak number of concurrent requests.
    """

    def __init__(self, responder: Responder):
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self._urls = context.Queue()
        self._stop = context.Event()
        self._process = context.Process(
            target=_serve_until_stopped, args=(responder, self._urls, self._stop), daemon=True
        )
        self.max_in_flight = 0

    def __enter__(self) -> str:
        self._process.start()
        return self._urls.get(timeout=60)

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        try:
            self.max_in_flight = self._urls.get(timeout=10)
        finally:
            self._process.join(timeout=10)
            if self._process.is_alive():
                self._process.terminate()
