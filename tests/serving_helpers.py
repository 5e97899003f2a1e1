"""Helpers for tests that talk to a completions server: a server on a thread for a block, handlers that
count, fail, stall or answer garbage, and readers of what an audit sent and cached."""

import json
import threading
import time
from contextlib import contextmanager

from phasekv.serve import make_server
from phasekv.serve.canary import canary_prompts
from phasekv.serve.server import CompletionHandler

FAST = dict(timeout=10.0, retries=2, backoff=0.01)


@contextmanager
def serving(scorer, handler=CompletionHandler, name="tiny", api_key=None, port=0, **options):
    """A server on 127.0.0.1 (port 0: a free port), run on a thread for the block."""
    server = make_server(scorer, name, handler=handler, api_key=api_key, port=port, **options)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def counting_handler(answer_limit=None, failures=0, fail_with=500, delay=0.0, body=None):
    """A handler class that records the prompts it answers, first answers `failures` times with
    `fail_with`, sleeps `delay`, answers `body` (raw bytes) instead of completing if given, and
    after `answer_limit` answers drops every connection unanswered (a stopped server). The canary
    requests every audit starts with are answered as they come and counted nowhere."""

    class Handler(CompletionHandler):
        answered: list = []
        started, failed = [0], [0]
        lock = threading.Lock()

        def do_POST(self):  # noqa: N802
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if request["prompt"] in canaries_of(self.server):
                self.send_json(200, self.server.completion_body(request))
                return
            with self.lock:
                stopped = answer_limit is not None and self.started[0] >= answer_limit
                fail = not stopped and self.failed[0] < failures
                self.failed[0] += fail
                self.started[0] += not stopped and not fail
            if stopped:
                self.close_connection = True
                return
            if fail:
                self.send_error_json(fail_with, "injected failure")
                return
            time.sleep(delay)
            if body is not None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            response = self.server.completion_body(request)
            with self.lock:
                self.answered.append(request["prompt"])
            self.send_json(200, response)

    return Handler


def canaries_of(server) -> list[list[int]]:
    """The canary prompts an audit of `server` sends first."""
    return canary_prompts(server.scorer.tokenizer, server.vocab_size)


def answer_lines(cache) -> list[dict]:
    """The "answer" records of a results cache file."""
    return [r for r in map(json.loads, cache.read_text().splitlines()) if r.get("kind") == "answer"]
