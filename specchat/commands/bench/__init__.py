"""The measurements: the speed benchmark (``specchat bench``: :mod:`.runner` runs it,
:mod:`.peers` the same models on transformers and llama.cpp, :mod:`.report` makes its tables,
goals and files, :mod:`.cli` is its command line), the page benchmark (``specchat bench-page``:
:mod:`.page`) and the soak (``specchat soak``: :mod:`.soak` runs it, :mod:`.soak_report` sums it
up, :mod:`.soak_cli` is its command line), with their data files (``bench_prompts.yaml``,
``bench_chat.json``, ``bench_page_chat.json``). Importing the package imports none of them."""
