"""A loopback stub of an OpenAI-compatible chat-completions endpoint for the LLM-judge tests:
``POST /v1/chat/completions`` answers ``##final score: N`` where N is the first grade whose
word (``rules``: a word -> grade) occurs in the user message's passage, else 0, with a
``usage`` of fixed token counts; ``/v1/broken`` answers 500. Every request's headers and body
are recorded. Started on 127.0.0.1 by the test (tests/linkserver.py ``loopback``), in a thread of its own
process, and shut down by it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

from linkserver import loopback

PROMPT_TOKENS = 100
COMPLETION_TOKENS = 5


def _handler(seen: list[dict], rules: dict[str, int]):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
            if "broken" in self.path:
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            user = body["messages"][-1]["content"]
            passage = user.split("Passage (", 1)[1].split("Split this problem", 1)[0]
            grade = next((g for word, g in rules.items() if word in passage), 0)
            reply = json.dumps({"choices": [{"message": {"role": "assistant",
                                                         "content": f"##final score: {grade}"}}],
                                "usage": {"prompt_tokens": PROMPT_TOKENS,
                                          "completion_tokens": COMPLETION_TOKENS}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args) -> None:  # quiet
            pass

    return Handler


@contextmanager
def judge_server(rules: dict[str, int]) -> Iterator[tuple[str, list[dict]]]:
    """``(API base URL, requests seen)`` of a stub judge running for the ``with`` block."""
    seen: list[dict] = []
    with loopback(_handler(seen, rules)) as base:
        yield f"{base}/v1", seen
