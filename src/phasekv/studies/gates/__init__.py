"""Gate concentration: static and per-window effective numbers of offsets and phase shares of every gate
(rows from `phasekv.internals.models.view(model).gate_rows`), over prompts or training snapshots (`run`,
`snapshots`), with the indexer's top-k hits by phase; a checkpoint's gates for the compressor
illustration (`illustration`); `result`, `figure`."""
