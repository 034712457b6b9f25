"""``servinglib publish``: copy the config's local model versions into a bucket."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(commands: Any, default_config: str) -> None:
    """Add ``publish`` to the ``servinglib`` subcommands."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "publish",
        help="publish the local model versions of a config to object storage",
        description=(
            "Copy every version of each model with a local repository to TO/<model>/<version>\n"
            "(any fsspec URL: s3://bucket/prefix, gs://…), where a server whose repository is\n"
            "TO/<model> picks it up. Each version is staged under a hidden prefix named by its\n"
            "content digest and appears whole; a version the store holds with the same content\n"
            "is left alone, with other content refused (versions are immutable). Credentials\n"
            "come from the store library's standard chain (AWS_* variables, ~/.aws, workload\n"
            "identity). Prints each version's digest and the sha256 pins of its files."
        ),
        epilog=(
            "exit codes: 0 published or unchanged, 2 bad config, a version that differs "
            "from the store's, or a store that cannot be written"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config",
        default=default_config,
        help="servinglib.yaml (default: $SERVINGLIB_CONFIG or %(default)s)",
    )
    parser.add_argument("--to", required=True, metavar="URL", help="e.g. s3://bucket/service")
    parser.add_argument("--model", action="append", help="only this model (repeatable)")
    parser.add_argument("--version", action="append", help="only this version (repeatable)")


def run(args: argparse.Namespace) -> int:
    """Publish and print one line per version, then its pins."""
    from servinglib.config.spec import load_config
    from servinglib.errors import ConfigError
    from servinglib.lifecycle.publish import publish_versions

    config = load_config(args.config)
    local = [m for m in config.models if m.repository_url is None]
    chosen = [m for m in local if args.model is None or m.name in args.model]
    unknown = sorted(set(args.model or ()) - {m.name for m in local})
    if unknown:
        names = ", ".join(m.name for m in local)
        raise ConfigError(
            f"--model {unknown}: no model with a local repository by that name in "
            f"{args.config}; its local models: {names}"
        )
    to = args.to.rstrip("/")
    for model in chosen:
        for result in publish_versions(model.repository, f"{to}/{model.name}", args.version):
            print(f"{result.state:9} {result.url}  digest {result.digest[:16]}")
            for path, digest in result.files.items():
                print(f"  sha256 {result.version}/{path}: {digest}")
    return 0
