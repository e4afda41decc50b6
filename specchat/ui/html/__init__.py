"""Events and replies as escaped HTML: the chat's tokens and stats line (``render``, ``markdown``,
``transcript``), the round views (``inspector``, ``timeline``, ``proof``, ``rounds``, ``race``), the
ledger, the waits; and the page's JavaScript and CSS, files in ``static/`` (``static_files``)."""
