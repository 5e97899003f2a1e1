"""phasekv: build, measure and explain phase sensitivity from chunked KV-cache compression."""

__version__ = "0.1.0"
