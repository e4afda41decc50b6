"""Shared test settings."""

import os

import torch

# Offline and private: no Gradio analytics, no Hub telemetry (UI_NOTES.md).
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Tiny test models run fastest on one thread, and a second OpenMP thread on a busy 2-core
# machine spins and slows every matmul by 10x or more.
torch.set_num_threads(1)
