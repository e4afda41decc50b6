"""One browser session, with no gradio import (the tests drive it): the session (``chat``), what
it shows (``views``; ``view``: the changes it asks of the page and when each is sent), the messages
sent and the one streaming run (``queue``), the race (``race``), the copy kept in the browser
(``saved``), each reply's record (``reply``) and the prefetching stream (``prefetch``)."""
