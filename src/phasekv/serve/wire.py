"""Shared facts of the wire format.

Token keys: with `"return_tokens_as_token_ids": true` (a vLLM extension, which this server also
honours) every token in a `logprobs` object is written as `token_id:<id>`, so log-probs name
token ids exactly instead of (possibly ambiguous) text pieces.
"""

TOKEN_ID_PREFIX = "token_id:"
COMPLETIONS_PATH = "/v1/completions"
MODELS_PATH = "/v1/models"
API_KEY_VARIABLES = ("PHASEKV_API_KEY", "OPENAI_API_KEY")
# the error type of a 500 whose model gave NaN or +inf: no retry can heal it (the same prompt, the same answer)
NON_FINITE_OUTPUT = "non_finite_output"


def token_key(token_id: int) -> str:
    """The wire name of a token id."""
    return f"{TOKEN_ID_PREFIX}{token_id}"


def parse_token_key(key: str) -> int | None:
    """The token id a `token_id:<id>` key names, or None for a text piece."""
    if key.startswith(TOKEN_ID_PREFIX):
        rest = key[len(TOKEN_ID_PREFIX) :]
        if rest.isdigit():
            return int(rest)
    return None
