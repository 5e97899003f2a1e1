"""The endpoint audit's results cache and canaries without a server: what a header must match, what a torn
last line becomes, which keys and fingerprints differ, and the canary distance on hand-made top lists."""

import json
import math

import pytest

from phasekv.serve.cache import ResultCache, fingerprint_id, request_key
from phasekv.serve.canary import CANARY_COUNT, CANARY_LENGTH, canary_difference, canary_prompts
from phasekv.serve.errors import EndpointError
from phasekv.tasks.tokenizer import build_word_tokenizer

FINGERPRINT = {
    "endpoint": "http://127.0.0.1:1/v1",
    "served_model": "m",
    "server_model": {"id": "m", "owned_by": "me"},
    "tokenizer_sha256": "ab" * 32,
    "request_options": {"text_prompts": False, "top_k": 20},
}
CANARIES = {"prompts": [[1, 2, 3]], "top": [[[5, -0.5], [6, -1.5]]]}


def test_request_keys_and_fingerprint_ids_tell_every_field_apart():
    key = request_key("m", "score", [1, 2, 3], {"n": 2})
    # pinned: a change of the key's text would make every cache on disk resend all it holds
    assert key == "b39ade953b805cfbc24a5851d3126f6f91f3932308d60513fa2700400147772d"
    assert fingerprint_id({"b": [1, 2], "a": 1}) == "8baa73198470c7bb"
    assert key == request_key("m", "score", (1, 2, 3), {"n": 2}) and len(key) == 64
    others = [("n", "score", [1, 2, 3], {"n": 2}), ("m", "top", [1, 2, 3], {"n": 2})]
    others += [
        ("m", "score", [1, 2, 4], {"n": 2}),
        ("m", "score", [1, 2, 3], {"n": 3}),
        ("m", "score", [1, 2, 3], None),
    ]
    assert len({key, *(request_key(*o) for o in others)}) == 1 + len(others)
    reordered = dict(reversed(list(FINGERPRINT.items())))
    assert fingerprint_id(reordered) == fingerprint_id(FINGERPRINT) and len(fingerprint_id(FINGERPRINT)) == 16
    for field, value in FINGERPRINT.items():
        changed = {**FINGERPRINT, field: {"other": value}}
        assert fingerprint_id(changed) != fingerprint_id(FINGERPRINT), field
    for option in ("text_prompts", "top_k"):
        changed = {**FINGERPRINT, "request_options": {**FINGERPRINT["request_options"], option: 1}}
        assert fingerprint_id(changed) != fingerprint_id(FINGERPRINT), option


def test_a_cache_is_resumed_only_for_its_own_fingerprint_and_canaries(tmp_path):
    path = tmp_path / "two" / "levels" / "cache.jsonl"
    cache = ResultCache(path, FINGERPRINT, CANARIES)
    assert len(cache) == 0 and cache.notice is None
    assert ResultCache(tmp_path / "fresh.jsonl").claim(FINGERPRINT, CANARIES) == 0.0  # a new cache: nothing differs
    header = json.loads(path.read_text().splitlines()[0])
    assert header == {"fingerprint": FINGERPRINT, "fingerprint_id": fingerprint_id(FINGERPRINT), "canaries": CANARIES}
    cache.put("k1", "score", [1.5, True])
    cache.put("k2", "other", {"a": 1})  # a kind the client never writes: any form
    assert cache.get("k1") == [1.5, True] and len(cache) == 2
    last = {"key": "k2", "kind": "other", "result": {"a": 1}, "check": 0}
    assert json.loads(path.read_text().splitlines()[-1]) == last
    resumed = ResultCache(path, FINGERPRINT, CANARIES)
    assert len(resumed) == 2 and resumed.get("k1") == [1.5, True] and resumed.get("k2") == {"a": 1}
    assert resumed.get("k3") is None and resumed.fingerprint == FINGERPRINT and resumed.canaries == CANARIES
    assert resumed.claim(FINGERPRINT, {"prompts": [[1, 2, 3]], "top": [[[5, -0.5004], [6, -1.5]]]}) == pytest.approx(
        4e-4
    )
    assert resumed.claim(FINGERPRINT, None) == 0.0  # nothing to compare: the fingerprint alone decides

    for field in FINGERPRINT:
        other = {**FINGERPRINT, field: "changed"}
        with pytest.raises(EndpointError, match=rf"differs in: {field}\);.*--cache NEW_FILE"):
            ResultCache(path, other)
    two = {**FINGERPRINT, "served_model": "n", "tokenizer_sha256": "cd", "new_field": 1}
    with pytest.raises(EndpointError, match=r"differs in: new_field, served_model, tokenizer_sha256\); refusing"):
        ResultCache(path, two)
    fewer = {k: v for k, v in FINGERPRINT.items() if k != "endpoint"}
    with pytest.raises(EndpointError, match=r"differs in: endpoint\); refusing"):
        ResultCache(path, fewer)
    with pytest.raises(EndpointError, match=r"other weights.*by 0\.5 nats, tolerance 0\.001.*nondeterministic server$"):
        ResultCache(path).claim(FINGERPRINT, {"prompts": [[1, 2, 3]], "top": [[[5, -1.0], [6, -1.5]]]})
    assert ResultCache(path).claim(FINGERPRINT, {"prompts": [[1, 2, 3]], "top": [[[5, -1.0], [6, -1.5]]]}, 0.5) == 0.5
    with pytest.raises(EndpointError, match="other weights.*inf nats"):
        ResultCache(path).claim(FINGERPRINT, {"prompts": [[9, 9, 9]], "top": CANARIES["top"]})
    assert len(ResultCache(path)) == 2  # refusals never touch the file


def test_caches_without_a_fingerprint_or_canaries_are_refused_once_they_hold_answers(tmp_path):
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({"key": "k", "kind": "score", "result": 1}) + "\n")
    with pytest.raises(EndpointError, match="tied to no check of the server's fingerprint .written by an older"):
        ResultCache(old, FINGERPRINT)
    no_canaries = tmp_path / "no-canaries.jsonl"
    ResultCache(no_canaries, FINGERPRINT).put("k", "score", 1)
    assert ResultCache(no_canaries, FINGERPRINT).canaries is None
    with pytest.raises(EndpointError, match="has no canary answers"):
        ResultCache(no_canaries, FINGERPRINT, CANARIES)
    header_only = tmp_path / "header.jsonl"
    ResultCache(header_only, FINGERPRINT)
    assert ResultCache(header_only, FINGERPRINT, CANARIES).canaries == CANARIES  # no answers: rewritten
    assert json.loads(header_only.read_text())["canaries"] == CANARIES
    assert ResultCache(None, FINGERPRINT, CANARIES).claim(FINGERPRINT, CANARIES) == 0.0


def test_a_torn_last_line_is_cut_and_a_whole_one_completed(tmp_path):
    path = tmp_path / "cache.jsonl"
    cache = ResultCache(path, FINGERPRINT, CANARIES)
    cache.put("k1", "score", 1)
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"key": "k2", "kind": "score", "res')
    torn = ResultCache(path, FINGERPRINT, CANARIES)
    assert len(torn) == 1 and path.read_bytes() == whole
    assert torn.notice == (
        f"results cache {path}: cut a torn last line (35 bytes, a write cut off by a crash); its request will be "
        "sent again"
    )
    path.write_bytes(whole + b'{"key": "k2", "kind": "score", "result": 2, "check": 0}')
    completed = ResultCache(path, FINGERPRINT, CANARIES)
    assert completed.get("k2") == 2 and path.read_bytes().endswith(b"0}\n") and "lacked its newline" in completed.notice
    assert ResultCache(path, FINGERPRINT, CANARIES).notice is None
    path.write_bytes(whole + b"garbage\n" + b'{"key": "k3", "kind": "score", "result": 3, "check": 0}\n')
    with pytest.raises(EndpointError, match="line 3 is unreadable"):
        ResultCache(path)
    for line in (b"[1, 2]", b'"key and result"', b"\xff\xfe"):  # JSON but no record, and not UTF-8
        path.write_bytes(whole + line + b"\n")
        with pytest.raises(EndpointError, match="line 3 is unreadable"):
            ResultCache(path)
    unclaimed = ResultCache(tmp_path / "x" / "y" / "read-only-so-far.jsonl")
    unclaimed.put("k", "score", 1)  # appending makes the folders too
    assert ResultCache(unclaimed.path).get("k") == 1
    assert ResultCache(None).canaries is None and ResultCache(tmp_path / "none.jsonl").fingerprint is None


def test_canary_prompts_are_fixed_ordinary_and_filtered():
    tokenizer = build_word_tokenizer()
    prompts = canary_prompts(tokenizer, 60)
    assert prompts == canary_prompts(tokenizer, 60) and len(prompts) == CANARY_COUNT
    special = set(tokenizer.all_special_ids)
    assert all(len(p) == CANARY_LENGTH and all(0 <= t < 60 and t not in special for t in p) for p in prompts)
    assert canary_prompts(tokenizer, 10**6) != canary_prompts(tokenizer, 60)  # the whole vocabulary is drawn from
    even = canary_prompts(tokenizer, 60, usable=lambda ids: ids[0] % 2 == 0)
    assert all(p[0] % 2 == 0 for p in even) and even != prompts
    with pytest.raises(EndpointError, match="no 3 canary prompts in 200 draws"):
        canary_prompts(tokenizer, 60, usable=lambda ids: False)
    with pytest.raises(EndpointError, match="^the tokenizer has no ordinary tokens to make canary prompts of$"):
        canary_prompts(tokenizer, 0)

    class Bare:  # a tokenizer with no special tokens to leave out (no all_special_ids at all)
        def __len__(self):
            return 7

    assert {t for p in canary_prompts(Bare(), 100) for t in p} <= set(range(7))


def test_canary_difference_on_hand_made_top_lists():
    a = {"prompts": [[1], [2]], "top": [[[5, -1.0], [6, -2.0]], [[7, -0.1], [8, -3.0]]]}
    assert canary_difference(a, a) == 0.0
    b = {"prompts": [[1], [2]], "top": [[[5, -1.0], [6, -2.0]], [[7, -0.3], [8, -3.0]]]}
    assert canary_difference(a, b) == pytest.approx(0.2) and canary_difference(b, a) == pytest.approx(0.2)
    entered = {"prompts": [[1], [2]], "top": [[[5, -1.0], [9, -1.25]], [[7, -0.1], [8, -3.0]]]}  # 9 above 6
    assert canary_difference(a, entered) == pytest.approx(0.75) and canary_difference(entered, a) == pytest.approx(0.75)
    assert canary_difference(a, {"prompts": [[1]], "top": a["top"][:1]}) == math.inf
    assert canary_difference(a, {"prompts": a["prompts"], "top": a["top"][:1]}) == math.inf
    assert canary_difference(a, {"prompts": a["prompts"], "top": [[], a["top"][1]]}) == math.inf


def test_answers_are_tied_to_the_check_they_were_accepted_after_and_can_be_dropped(tmp_path):
    path = tmp_path / "cache.jsonl"
    cache = ResultCache(path, FINGERPRINT, CANARIES)
    cache.put("k1", "score", 1)
    cache.passed(CANARIES, 0.0)  # written with the first answer tied to it, not before
    assert len(path.read_text().splitlines()) == 2
    cache.put("k2", "score", 2)
    cache.put("k3", "score", 3)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[2] == {"check": 1, "canaries": CANARIES, "canary_difference": 0.0}
    assert [line["check"] for line in lines[1:] if "key" in line] == [0, 1, 1]
    cache.discard({"k2", "k3"})  # possibly another model's: gone from memory and file
    assert cache.get("k2") is None and len(ResultCache(path, FINGERPRINT, CANARIES)) == 1
    resumed = ResultCache(path)
    assert resumed.last_check == 1
    path.write_text(path.read_text() + json.dumps({"key": "k4", "kind": "score", "result": 4, "check": 7}) + "\n")
    with pytest.raises(EndpointError, match="tied to check 7, which no earlier line records"):
        ResultCache(path)


@pytest.mark.parametrize(
    ("kind", "result", "problem"),
    [
        ("answer", {"logprobs": "x", "top_ids": 5}, "expected an object with the lists"),
        ("answer", {"logprobs": [-1.0], "top_ids": [3, 4], "top_logprobs": [-1.0]}, "its lists differ in length"),
        ("answer", {"logprobs": ["-1"], "top_ids": [3], "top_logprobs": [-1.0]}, "not a number"),
        ("answer", [1, 2], "expected an object"),
        ("top", {"a": 1}, "list of \\[token id, log-prob\\] pairs"),
        ("next", [-1.0, None], "list of log-probs"),
        ("echoes", "false", "expected true or false"),
    ],
)
def test_a_cached_answer_of_the_wrong_form_is_refused_naming_its_line(tmp_path, kind, result, problem):
    """Issue 53: a cache line of valid JSON with a wrong-typed result failed later with a TypeError."""
    path = tmp_path / "cache.jsonl"
    cache = ResultCache(path, FINGERPRINT, CANARIES)
    cache.put("good", "answer", {"logprobs": [-1.0], "top_ids": [3], "top_logprobs": [-0.5]})
    cache.put("bad", kind, result)
    lines = len(path.read_text().splitlines())
    wrong = f"line {lines}: its answer .kind '{kind}'. has the wrong form .[^)]*{problem}"
    with pytest.raises(EndpointError, match=wrong):
        ResultCache(path, FINGERPRINT, CANARIES)


def test_a_full_disk_while_caching_is_one_write_error_and_keeps_every_earlier_answer(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    from phasekv.files import WriteError

    path = tmp_path / "cache.jsonl"
    cache = ResultCache(path, FINGERPRINT, CANARIES)
    cache.put("k1", "score", 1)
    real_open = Path.open

    def full(file, mode="r", *args, **kwargs):
        if file == path and "a" in mode:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", full)
    with pytest.raises(WriteError, match="cannot write .*cache.jsonl: No space left on device .free space"):
        cache.put("k2", "score", 2)
    monkeypatch.undo()
    assert ResultCache(path, FINGERPRINT, CANARIES).get("k1") == 1
