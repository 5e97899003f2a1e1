"""The knockout map: accuracy change by phase when each KV head (or layer) is knocked out at the final
position (`ablation`), over lookup prompts (`run`); `result`, `figure`."""
