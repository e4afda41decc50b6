"""The `specchat` / `python -m specchat` commands: the CLI, the bench, the soak, chat scripts."""
