"""The charting kit below the studies and the report: Vega-Lite specs rendered to PNG and HTML (`vega`), the
labels and number formats every figure shares (`labels`), and the inputs a figure is drawn from (`inputs`).
Studies build their figures with it and the report lays them out, so neither imports the other's internals."""
