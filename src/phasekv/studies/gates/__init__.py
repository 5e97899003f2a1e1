"""Gate concentration: static and per-window effective numbers of offsets and phase shares of every gate
(`metrics`, `hf_gates` for transformers' DeepSeek-V4 compressor), over prompts or training snapshots (`run`,
`snapshots`), the indexer's top-k hits by phase (`topk`), a checkpoint's gates for the compressor
illustration (`illustration`); `result`, `figure`."""
