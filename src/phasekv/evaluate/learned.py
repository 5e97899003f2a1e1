"""Whether a lookup result shows a model that learned retrieval at all.

A model whose mean accuracy is not clearly above guessing among the names present in the prompt
(1 / records) has not learned the task: its flatness across residues says nothing about phase.
"""

from __future__ import annotations


def learned(result: dict) -> bool:
    """True when the lower end of the mean accuracy's 95% interval exceeds twice the name-guessing
    level 2 / records. `result`: a lookup result dict (`run_lookup`), with its options."""
    options = result.get("lookup_options") or result["options"]
    low = result["summary"]["stat_intervals"]["mean"][0]
    return low > 2.0 / options["n_records"]
