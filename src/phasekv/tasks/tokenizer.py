"""The word-level tokenizer of our own models, built with the `tokenizers` library.

One token per word: special tokens, punctuation, the digits 0-9 (numbers are split into digits),
the animals, the names, the filler words and the words of every filler family. The vocabulary
order is fixed by the word lists, so the vocabulary size and every id are deterministic.
Saved as `tokenizer.json` (plus `tokenizer_config.json`) so
`transformers.PreTrainedTokenizerFast(tokenizer_file=...)` or `.from_pretrained(dir)` loads it.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from phasekv.tasks import words

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>"}
PUNCTUATION = (",", ";", ".", ":", "=", "?", "!", "(", ")", "[", "]", "-", "'", '"', "/", "*", "+", "#")
DIGITS = tuple(str(d) for d in range(10))


def word_vocabulary() -> list[str]:
    """All tokens in id order: specials, punctuation, digits, animals, names, filler words."""
    family_words = [w for family in words.filler_families() for w in words.family_words(family)]
    ordered = [
        *SPECIAL_TOKENS.values(),
        *PUNCTUATION,
        *DIGITS,
        *words.animals(),
        *words.names(),
        *words.filler_words(),
        *family_words,
    ]
    return list(dict.fromkeys(ordered))


def build_word_tokenizer() -> PreTrainedTokenizerFast:
    """A WordLevel tokenizer over `word_vocabulary()`, wrapped for transformers.

    Pre-tokenisation splits on whitespace, isolates each punctuation character and each digit,
    so "cat,dog 42" becomes ["cat", ",", "dog", "4", "2"]. Unknown words map to <unk>.
    """
    vocab = {token: i for i, token in enumerate(word_vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL_TOKENS["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Punctuation(behavior="isolated"),
            pre_tokenizers.Digits(individual_digits=True),
        ]
    )
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL_TOKENS)


def save_word_tokenizer(directory: str | Path, tokenizer: PreTrainedTokenizerFast | None = None) -> Path:
    """Write `tokenizer.json` and `tokenizer_config.json` into `directory`; returns the json path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (tokenizer or build_word_tokenizer()).save_pretrained(directory)
    return directory / "tokenizer.json"


def load_word_tokenizer(directory: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved by `save_word_tokenizer` from `directory` (or its tokenizer.json)."""
    path = Path(directory)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"no tokenizer.json at {path}")
    return PreTrainedTokenizerFast(tokenizer_file=str(path), **SPECIAL_TOKENS)
