"""Phase conformance: does an implementation compute the same next-token distributions in every execution
mode (parallel, decode, chunked prefill at every boundary phase, padded batches, forked caches), and the same
as a reference implementation, at every position mod S (`run`); `result`, `figure`."""
