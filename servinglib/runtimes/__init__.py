"""Models for standard artifacts, served with no user code (``runtime:`` in servinglib.yaml).

Each runtime imports its framework lazily, inside ``load()``, in the worker after fork:
ONNX Runtime and torch are not fork-safe.
"""
