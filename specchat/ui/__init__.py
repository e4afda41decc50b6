"""The Gradio page: layout, the per-session controller, charts, inspector, ledger view, HTML rendering, ZeroGPU."""
