"""The `opspec` command line: `opspec.cli.main.main(argv) -> exit status`; the one reporter
is `opspec.cli.report`."""
