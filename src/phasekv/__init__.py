"""phasekv: build, measure and explain phase sensitivity from chunked KV-cache compression."""

from .version import __version__ as __version__


def probe(model=None, probe: str = "lookup", **options):
    """Run a lookup, needle, flip or knockout probe and return its typed result (`phasekv.api.probe`)."""
    from .api import probe as run

    return run(model, probe, **options)


def audit(model, **options):
    """Audit a model for phase-sensitive retrieval and return its typed result (`phasekv.api.audit`)."""
    from .api import audit as run

    return run(model, **options)
