from specchat.commands.cli import main

raise SystemExit(main())
