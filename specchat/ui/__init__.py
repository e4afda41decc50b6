"""The Gradio page: start-up, layout, events, the per-session controller, charts, the round views, ledger view, HTML rendering, ZeroGPU.

Importing any module of it keeps gradio and huggingface_hub offline and private: both settings
must be in the environment before either is imported.
"""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
