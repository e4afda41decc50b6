"""``python app.py [options]``: the chat app, also a Hugging Face Space's ``app_file``.

The app itself is :mod:`specchat.ui.page.app` (the installed command ``specchat app`` runs the same
code); importing this file gives that module.
"""

import sys

from specchat.ui.page import app as _app

if __name__ == "__main__":
    sys.exit(_app.main())
sys.modules[__name__] = _app  # `import app` (from the repository root) is specchat.ui.page.app
