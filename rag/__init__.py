"""rag: an evaluation harness and experiment tracker for retrieval over code repositories."""

import os

# OpenMP threads (torch's and MKL's intra-op pool) that spin while waiting for work turn a
# shared machine into a trap: with another process on the same 2 cores, one MiniLM query
# embedding took ~500 ms with the default (active) wait policy and 24-39 ms with PASSIVE, and
# a 32-chunk batch 2.3-2.8 s against 1.6-1.7 s (alternating processes, side by side, while
# another training job shared the cores). Set before torch is imported (libgomp reads it
# once, when loaded); an OMP_WAIT_POLICY already in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# ONNX Runtime 1.31's telemetry (OneDS) writes a device id and an event database under
# ~/.cache/Microsoft/DeveloperTools/.onnxruntime when its environment is created (and would
# send them where it can reach): off unless the environment says otherwise. Nothing of this
# project is sent anywhere.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

__version__ = "0.1.0"
