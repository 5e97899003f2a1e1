"""The presses profiles: the compression methods they audit, the probes' options and how the cells run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace

from phasekv.scoring.press_spec import PRESETS, needs_kvpress, parse_press, press_stride
from phasekv.tasks.lookup import LookupOptions

DEFAULT_MODEL = "models/smollm2-135m"  # where `phasekv models get smollm2-135m` writes by default


@dataclass(frozen=True)
class PressMethod:
    """One compression method: `press` is a --press spec (preset name, pool:..., kvpress call) or None (full cache)."""

    name: str
    label: str
    press: str | None = None

    @property
    def needs_kvpress(self) -> bool:
        return self.press is not None and needs_kvpress(parse_press(self.press))

    @property
    def spec_text(self) -> str | None:
        return None if self.press is None else PRESETS.get(self.press, self.press)

    @property
    def has_grid(self) -> bool:
        """Whether the method cuts the context on a grid that can move (the grid-shift test applies)."""
        return self.press is not None and press_stride(parse_press(self.spec_text))[0] is not None


@dataclass(frozen=True)
class PressProfile:
    name: str
    description: str
    methods: tuple[PressMethod, ...]
    probes: dict = dataclasses.field(default_factory=dict)  # probe name (`studies.probe.registry`) -> its options
    resamples: int = 1000
    batch_size: int = 8
    threads: int = 1  # torch threads of each cell's process
    jobs: int = 2  # cells run at once (one core each: on a shared 2-core CPU this beats 2 threads per cell)
    device: str = "cpu"  # torch device of every cell's model (`phasekv reproduce --device cuda` on a GPU)
    grid_shift: bool = True  # methods with a chunk grid also take the grid-shift test (S times the scoring)

    def only(self, names: list[str]) -> PressProfile:
        """The profile restricted to the methods `names` (in the profile's order); an unknown name is refused with
        the known ones. Its cells are the full profile's, so a later run of the whole profile reuses them."""
        known = [method.name for method in self.methods]
        unknown = [name for name in names if name not in known]
        if unknown or not names:
            raise ValueError(
                f"unknown method(s) {', '.join(unknown) or '(none given)'}; {self.name} has: {', '.join(known)}"
            )
        return replace(self, methods=tuple(method for method in self.methods if method.name in names))

    def command_flags(self) -> str:
        """The `phasekv reproduce` flags that make this profile from the named one it was derived from (--methods,
        --device, --batch-size, --jobs), so a printed command computes these very cells."""
        named = PRESS_PROFILES.get(self.name, self)  # a profile made in code has no flags to name
        flags = []
        if self.methods != named.methods:
            flags.append("--methods " + ",".join(method.name for method in self.methods))
        for flag, field in (("--device", "device"), ("--batch-size", "batch_size"), ("--jobs", "jobs")):
            if getattr(self, field) != getattr(named, field):
                flags.append(f"{flag} {getattr(self, field)}")
        return " ".join(flags)


METHODS = (
    PressMethod("full", "Full cache (control)"),
    PressMethod("knorm", "KNorm 0.5 (no grid)", "knorm"),
    PressMethod("snapkv", "SnapKV 0.5 (no grid)", "snapkv"),
    PressMethod("streaming", "StreamingLLM 0.5 (no grid)", "streaming"),
    PressMethod("chunkkv8", "ChunkKV(SnapKV 0.5), chunk 8", "chunkkv8"),
    PressMethod("chunkkv4", "ChunkKV(SnapKV 0.5), chunk 4", "chunkkv4"),
    PressMethod("block8", "BlockPress(KNorm 0.5), block 8", "block8-knorm"),
    PressMethod("pool-w8s8", "phasekv pooling W8/S8, local 16", "pool-w8s8"),
    PressMethod("pool-w8s4", "phasekv pooling W8/S4, local 16", "pool-w8s4"),
)

# Modulus 16: a multiple of every grid (4, 8) and above each, so each grid's period check runs at its stride;
# 2 blocks put the target keys over 62 positions, 7.75 periods of 8 for the phase test (it needs 4). The natural
# template pads with filler words: SmolLM2-135M-Instruct answers 87.5% of the full-cache prompts (one block: 86.7%;
# 39.4% padded with " ."). Cost: 453 distinct prompts of 119 tokens per scoring, 3-6 minutes on one core; each
# method with a chunk grid scores them once per grid offset (the grid-shift test: S times), 36 scorings in all.
PRESSES_LOOKUP = LookupOptions(
    n_records=8, n_demos=4, modulus=16, n_mappings=8, spread_blocks=2, protocol="prefix", seed=0, template="natural"
)
PRESSES = PressProfile(
    name="presses",
    description="training-free KV-cache compression (kvpress presses, phasekv pooling) on a pretrained HF model",
    methods=METHODS,
    probes={"lookup": PRESSES_LOOKUP},
)
# The same design with 28x the mappings: 11,243 distinct prompts, a minimum detectable single-phase drop of 8.8
# points at a flat 70% (`phasekv eval lookup ... --mappings 224 --dry-run`), against 37.5 for `presses`. About
# 25 times the scoring of `presses`: a GPU's job (hours per cell on one CPU core).
PRESSES_LARGE = replace(
    PRESSES,
    name="presses-large",
    description=f"{PRESSES.description}, sized to see a 10-point weak phase (224 mappings)",
    probes={"lookup": replace(PRESSES.probes["lookup"], n_mappings=224)},
    batch_size=32,
)
PRESS_PROFILES = {p.name: p for p in (PRESSES, PRESSES_LARGE)}
