from catsim.cli.main import main

raise SystemExit(main())
