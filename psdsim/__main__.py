"""`python -m psdsim` is the `psdsim` command."""

from psdsim.cli import main

raise SystemExit(main())
