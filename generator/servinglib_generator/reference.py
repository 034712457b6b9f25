"""The prompt tables of ``docs/reference/generator.md``, generated from the prompt definitions.

Print them with ``python -m servinglib_generator.reference``; a test checks that the page
carries exactly this text, so the reference cannot drift from the code.
"""

from __future__ import annotations

from collections.abc import Sequence

from servinglib_generator.prompts import MODEL_PROMPTS, SERVICE_PROMPTS, Prompt

__all__ = ["prompt_reference", "prompt_table"]


def prompt_table(prompts: Sequence[Prompt]) -> str:
    """A Markdown table of ``prompts``, in the order they are asked."""
    rows = [
        "| key | question | default | accepted values |",
        "|---|---|---|---|",
    ]
    for prompt in prompts:
        default = "*required*" if prompt.default_doc == "required" else prompt.default_doc
        question = prompt.question.replace("|", "\\|")
        rows.append(f"| `{prompt.key}` | {question} | {default} | {prompt.accepts} |")
    return "\n".join(rows) + "\n"


def prompt_reference() -> str:
    """Both tables: ``servinglib-generate`` and ``servinglib-generate add-model``."""
    return (
        "### `servinglib-generate`\n\n"
        + prompt_table(SERVICE_PROMPTS)
        + "\n### `servinglib-generate add-model`\n\n"
        + prompt_table(MODEL_PROMPTS)
    )


if __name__ == "__main__":
    print(prompt_reference(), end="")
