"""Gate cycling: rotate every gate's offset parameters by delta (`cycling`) and compare accuracy by phase
with the prediction A0((r - delta) mod S) (`run`); `result`, `figure`."""
