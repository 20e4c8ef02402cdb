from builder.commands.cli import main

raise SystemExit(main())
