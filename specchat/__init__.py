"""specchat: see speculative decoding work (a local chat, its engine, drafters and measurements).

Importing it keeps huggingface_hub and Gradio offline and private (:mod:`specchat.offline`):
the switches must be in the environment before either library is imported.
"""

from specchat.offline import stay_offline

stay_offline()
