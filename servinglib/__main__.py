"""`python -m servinglib`: the same command line as `servinglib`."""

from servinglib.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
