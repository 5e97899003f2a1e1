"""MKL's vector math kernels are settled before any phasekv model runs: importing the core calls every function
ATen sends to MKL VML once on a single element of each float dtype, so no first call of one of them can run on
several threads at once (where oneMKL 2024.2 may give one thread's chunk a low-accuracy kernel). The race
itself needs an oversubscribed machine and many fresh processes, so this checks the calls that prevent it."""

import json
import subprocess
import sys

from phasekv.numerics import VML_DTYPES, VML_FUNCTIONS

RECORD_IMPORT = """
import json

import torch
from torch.overrides import TorchFunctionMode

seen = set()


class Record(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if args and isinstance(args[0], torch.Tensor):
            seen.add((getattr(func, "__name__", ""), str(args[0].dtype), args[0].numel()))
        return func(*args, **(kwargs or {}))


with Record():
    import phasekv.model  # what every model, cache and scorer imports
print(json.dumps(sorted(seen)))
"""


def test_importing_the_core_calls_every_vml_function_on_one_element_of_each_float_dtype():
    run = subprocess.run([sys.executable, "-c", RECORD_IMPORT], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    seen = {(name, dtype) for name, dtype, numel in json.loads(run.stdout) if numel == 1}
    missing = [(name, str(dtype)) for name in VML_FUNCTIONS for dtype in VML_DTYPES if (name, str(dtype)) not in seen]
    assert not missing, missing
