"""One module per `psdsim` command.

Each module has `HELP` (its line in `psdsim --help`), `add_arguments(parser, argv)` and
`run(args) -> exit code`, and imports what the command needs inside those functions, so that
`psdsim --help` and every command load only their own dependencies.
"""
