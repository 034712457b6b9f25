"""The command line: `servinglib` and its subcommands, with `doctor` and `init` beside it."""
