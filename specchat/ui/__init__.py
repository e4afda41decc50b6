"""The page, in four folders, each importing only from those before it: ``html`` (events as HTML,
the page's JS and CSS), ``charts`` (Plotly figures), ``session`` (one browser session, no gradio)
and ``page`` (the Gradio page: the only importer of gradio).

Importing any module of it keeps gradio and huggingface_hub offline and private: both settings
must be in the environment before either is imported.
"""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
