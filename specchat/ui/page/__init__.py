"""The Gradio page, the only part of specchat that imports gradio: start-up (``app``), the
components (``layout``), the events as data (``wiring``) and their ``handlers``, the one loaded
service (``host``), ZeroGPU (``zerogpu``)."""
