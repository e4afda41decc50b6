import sys

try:
    from specchat.commands.cli import main
except KeyboardInterrupt:  # Ctrl-C while Python imports the command line: one line, as cli.main says it
    print("\npython -m specchat: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(main())
