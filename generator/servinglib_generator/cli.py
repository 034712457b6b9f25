"""The ``servinglib-generate`` command: parse, call the library, print, exit.

::

    servinglib-generate                                     # asks each question
    servinglib-generate --no-input --output-dir . team=eta model=eta runtime=onnx
    servinglib-generate add-model model=fraud runtime=torch # inside a generated repository
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import version as package_version
from pathlib import Path

from servinglib_generator.errors import GeneratorError, SpecError
from servinglib_generator.prompts import MODEL_PROMPTS, SERVICE_PROMPTS, AskFunction, Prompt

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _keys_epilog(prompts: Sequence[Prompt]) -> str:
    lines = ["keys (KEY=VALUE; the rest are asked, or take their defaults with --no-input):"]
    for p in prompts:
        default = "required" if p.default_doc == "required" else f"default: {p.default_doc}"
        lines.append(f"  {p.key:<24} {p.question} ({default})")
    return "\n".join(lines)


def _new_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="servinglib-generate",
        description="Generate a team's model-serving repository (run `servinglib-generate "
        "add-model --help` to add a model to one).",
        epilog=_keys_epilog(SERVICE_PROMPTS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=Path(),
        help="where the repository directory <service>/ is created (default: .)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="render over an existing repository directory (your other files are kept)",
    )
    parser.add_argument(
        "--servinglib-spec",
        metavar="SPEC",
        help="where pip gets servinglib, as the servinglib= answer: a requirement "
        "('servinglib==0.2.1' to pin), a .whl file or a checkout (both vendored into "
        "wheels/ for air-gapped builds); default: the range compatible with this servinglib",
    )
    _add_common(parser, "team=eta")
    return parser


def _add_model_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="servinglib-generate add-model",
        description="Add a model to a generated repository, keeping your edits.",
        epilog=_keys_epilog(MODEL_PROMPTS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--repo", type=Path, default=Path(), help="the generated repository (default: .)"
    )
    _add_common(parser, "model=fraud runtime=torch")
    return parser


def _add_common(parser: argparse.ArgumentParser, example: str) -> None:
    parser.add_argument(
        "--version",
        action="version",
        version=f"servinglib-generate {package_version('servinglib')}",
    )
    parser.add_argument(
        "--no-input",
        action="store_true",
        help="ask nothing: missing keys take their defaults (required ones are an error)",
    )
    parser.add_argument("answers", nargs="*", metavar="KEY=VALUE", help=f"answers, e.g. {example}")


def _parse_answers(pairs: Sequence[str]) -> dict[str, str]:
    answers: dict[str, str] = {}
    bad = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            bad.append(f"{pair!r}: expected KEY=VALUE, e.g. model=eta")
        elif key in answers:
            bad.append(f"{key}: given twice; keep one")
        else:
            answers[key] = value
    if bad:
        raise SpecError(bad)
    return answers


def _ask(prompt: Prompt, default: str | None, error: str | None) -> str:
    if error:
        print(f"  {error}", file=sys.stderr)
    suffix = f" [{default}]" if default else ""
    try:
        return input(f"{prompt.key}: {prompt.question}{suffix}: ")
    except EOFError:
        raise GeneratorError(
            f"no answer for {prompt.key!r} (end of input); pass {prompt.key}=VALUE or --no-input"
        ) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``servinglib-generate`` console script; returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if args_list[:1] == ["add-model"]:
            args = _add_model_parser().parse_args(args_list[1:])
            _require_cookiecutter()
            return _add_model(args)
        args = _new_parser().parse_intermixed_args(args_list)
        _require_cookiecutter()
        return _generate(args)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except GeneratorError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("\naborted; nothing was written", file=sys.stderr)
        return EXIT_FAILED


def _require_cookiecutter() -> None:
    """Fail before asking any question when the generator extra is not installed."""
    try:
        import cookiecutter  # type: ignore[import-untyped]  # noqa: F401
    except ImportError as e:
        raise GeneratorError(
            "servinglib-generate needs cookiecutter, which this environment lacks "
            f"({sys.executable}); install servinglib's generator extra: pip install "
            "'servinglib[generator]' (or just pip install 'cookiecutter>=2.5')"
        ) from e


def _generate(args: argparse.Namespace) -> int:
    from servinglib_generator.generate import generate_service
    from servinglib_generator.spec import build_service_spec

    ask: AskFunction | None = None if args.no_input else _ask
    answers = _parse_answers(args.answers)
    if args.servinglib_spec is not None:
        if "servinglib" in answers and answers["servinglib"] != args.servinglib_spec:
            raise SpecError(["servinglib= and --servinglib-spec disagree; give only one of them"])
        answers["servinglib"] = args.servinglib_spec
    spec = build_service_spec(answers, ask)
    repo = generate_service(spec, args.output_dir, overwrite=args.overwrite)
    print(f"generated {repo}")
    print("next: read its README.md; in short:")
    print(f"  cd {repo}")
    print("  python -m venv .venv && . .venv/bin/activate")
    print("  pip install -r requirements.txt -r requirements-dev.txt && pytest")
    return EXIT_OK


def _add_model(args: argparse.Namespace) -> int:
    from servinglib_generator.add_model import add_model
    from servinglib_generator.spec import build_model_spec

    ask: AskFunction | None = None if args.no_input else _ask
    model = build_model_spec(_parse_answers(args.answers), ask)
    added = add_model(args.repo, model)
    print(f"added model {model.name!r} ({model.runtime}) to {args.repo.resolve()}")
    for path in added.created:
        print(f"  created {path}")
    for path in added.updated:
        print(f"  updated {path}")
    if not added.comments_kept:
        print(
            "warning: servinglib.yaml could not be edited in place and was rewritten from its "
            "data: its keys and values are kept, its comments and layout are not",
            file=sys.stderr,
        )
    for step in added.manual_steps:
        print(f"to do by hand: {step}", file=sys.stderr)
    print("next: pytest, then servinglib selftest")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
