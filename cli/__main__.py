"""`python -m opspec.cli`: the `opspec` command."""

from opspec.cli.main import main

raise SystemExit(main())
