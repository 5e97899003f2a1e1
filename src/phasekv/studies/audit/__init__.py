"""The audit: one call from a model to its phase verdict: a timed template screen, a design sized to a time budget
or a target minimum detectable effect, the lookup (and needle) probes, the report (`options`, `run`, `result`)."""
