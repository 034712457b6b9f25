"""Every question the generator asks, in order: one table drives the prompts, ``key=value``
parsing, validation and the reference page (``docs/reference/generator.md``).

Each answer is parsed as soon as it is given, seeing the answers before it, so cross-field
rules (``cpu_limit >= cpu_request``, ``min_replicas <= replicas <= max_replicas``) are
checked at the prompt that can fix them.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servinglib_generator._sink_answers import (
    parse_bootstrap_servers,
    parse_lake_url,
    parse_sinks,
    parse_topic,
)
from servinglib_generator._validators import (
    FieldError,
    parse_cpu,
    parse_dns_label,
    parse_int,
    parse_memory,
    parse_owners,
    quantity_value,
)
from servinglib_generator.errors import SpecError
from servinglib_generator.runtimes import RUNTIMES
from servinglib_generator.source import default_servinglib_source, parse_servinglib_source

__all__ = ["MODEL_PROMPTS", "SERVICE_PROMPTS", "AskFunction", "Prompt", "resolve_answers"]

Answers = Mapping[str, Any]


@dataclass(frozen=True)
class Prompt:
    """One question.

    Attributes:
        key: the name used in ``key=value`` arguments.
        question: what the interactive prompt shows.
        parse: turns the raw answer into its value, seeing earlier values; raises FieldError.
        default: the default answer given earlier values; None when an answer is required.
        default_doc: the default as the reference page describes it.
        accepts: the values accepted, as the reference page describes them.
    """

    key: str
    question: str
    parse: Callable[[str, Answers], Any]
    default: Callable[[Answers], str | None]
    default_doc: str
    accepts: str


AskFunction = Callable[[Prompt, "str | None", "str | None"], str]
"""``ask(prompt, default, error)`` returns the raw answer; ``error`` explains a rejected one."""


def _required(_: Answers) -> str | None:
    return None


def _constant(value: str) -> Callable[[Answers], str]:
    return lambda _: value


def _larger(floor: str, key: str, *, cpu: bool) -> Callable[[Answers], str]:
    """Default to ``floor`` unless the answer under ``key`` is larger."""

    def default(values: Answers) -> str:
        other = values[key]
        return other if quantity_value(other, cpu=cpu) > quantity_value(floor, cpu=cpu) else floor

    return default


def _parse_limit(parse: Callable[[str], str], request_key: str, *, cpu: bool) -> Any:
    def parse_limit(raw: str, values: Answers) -> str:
        limit = parse(raw)
        request = values.get(request_key)
        if request is not None and quantity_value(limit, cpu=cpu) < quantity_value(
            request, cpu=cpu
        ):
            raise FieldError(f"{limit!r} is below {request_key} {request!r}; raise it")
        return limit

    return parse_limit


def _parse_runtime(raw: str, _: Answers) -> str:
    if raw not in RUNTIMES:
        raise FieldError(f"{raw!r} is not a runtime; choose one of {', '.join(RUNTIMES)}")
    return raw


def _parse_max_replicas(raw: str, values: Answers) -> int:
    minimum: int = values.get("min_replicas", 1)
    return parse_int(raw, minimum, 1000)


def _parse_replicas(raw: str, values: Answers) -> int:
    minimum: int = values.get("min_replicas", 1)
    maximum: int = values.get("max_replicas", 1000)
    return parse_int(raw, minimum, maximum)


_IMAGE = re.compile(
    r"^(?:[a-z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:[._/-][a-z0-9]+)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)


def _parse_image(raw: str, _: Answers) -> str:
    if not _IMAGE.match(raw):
        raise FieldError(
            f"{raw!r} is not a container image reference; use e.g. "
            "'ghcr.io/my-team/my-service:0.1.0'"
        )
    return raw


def _parse_python(raw: str, _: Answers) -> str:
    if raw not in ("3.11", "3.12", "3.13"):
        raise FieldError(f"{raw!r} is not supported; choose 3.11, 3.12 or 3.13")
    return raw


def _servinglib(raw: str, _: Answers) -> Any:
    return parse_servinglib_source(raw)


_TEAM = Prompt(
    "team",
    "Team that owns the service (also its Kubernetes namespace)",
    lambda raw, _: parse_dns_label(raw),
    _required,
    "required",
    "a DNS label: lower-case letters, digits and '-', starting with a letter, at most 63 "
    "characters",
)
_MODEL = Prompt(
    "model",
    "Name of the model (the `model_id` of requests)",
    lambda raw, _: parse_dns_label(raw),
    _required,
    "required",
    "a DNS label, at most 63 characters",
)
_RUNTIME = Prompt(
    "runtime",
    "Runtime: python (your Model class), onnx (model.onnx), torch (model.pt2), sklearn "
    "(model.skops), xgboost (model.json) or lightgbm (model.txt)",
    _parse_runtime,
    _constant("python"),
    "`python`",
    "`python`, `onnx`, `torch`, `sklearn`, `xgboost` or `lightgbm`",
)

SERVICE_PROMPTS: tuple[Prompt, ...] = (
    _TEAM,
    _MODEL,
    Prompt(
        "service",
        "Name of the service (Deployment, Service and image name)",
        lambda raw, _: parse_dns_label(raw, max_length=50),
        lambda v: f"{v['model']}-service",
        "`<model>-service`",
        "a DNS label, at most 50 characters (objects get suffixes such as `-envoy`)",
    ),
    _RUNTIME,
    Prompt(
        "owners",
        "Owners for CODEOWNERS: @user, @org/team or e-mail, comma-separated",
        lambda raw, _: parse_owners(raw),
        lambda v: f"@{v['team']}",
        "`@<team>`",
        "`@user`, `@org/team` or e-mail addresses, comma-separated",
    ),
    Prompt(
        "workers",
        "gunicorn worker processes per pod (about one per CPU core)",
        lambda raw, _: parse_int(raw, 1, 64),
        _constant("2"),
        "`2`",
        "1 to 64",
    ),
    Prompt(
        "cpu_request",
        "CPU request of the app container (e.g. 500m, 1)",
        lambda raw, _: parse_cpu(raw),
        _constant("1"),
        "`1`",
        "a Kubernetes CPU quantity: `500m`, `1`, `1.5`",
    ),
    Prompt(
        "cpu_limit",
        "CPU limit of the app container",
        _parse_limit(parse_cpu, "cpu_request", cpu=True),
        _larger("2", "cpu_request", cpu=True),
        "`2`, or `cpu_request` if larger",
        "a CPU quantity, at least `cpu_request`",
    ),
    Prompt(
        "memory_request",
        "Memory request of the app container (e.g. 512Mi, 1Gi)",
        lambda raw, _: parse_memory(raw),
        _constant("1Gi"),
        "`1Gi`",
        "a Kubernetes memory quantity: `512Mi`, `1Gi`",
    ),
    Prompt(
        "memory_limit",
        "Memory limit of the app container",
        _parse_limit(parse_memory, "memory_request", cpu=False),
        _larger("2Gi", "memory_request", cpu=False),
        "`2Gi`, or `memory_request` if larger",
        "a memory quantity, at least `memory_request`",
    ),
    Prompt(
        "min_replicas",
        "Fewest pods the autoscaler keeps",
        lambda raw, _: parse_int(raw, 1, 1000),
        _constant("2"),
        "`2`",
        "1 to 1000",
    ),
    Prompt(
        "max_replicas",
        "Most pods the autoscaler starts",
        _parse_max_replicas,
        lambda v: str(max(10, v["min_replicas"])),
        "`10`, or `min_replicas` if larger",
        "`min_replicas` to 1000",
    ),
    Prompt(
        "replicas",
        "Pods at first deployment (between min_replicas and max_replicas)",
        _parse_replicas,
        lambda v: str(v["min_replicas"]),
        "`min_replicas`",
        "`min_replicas` to `max_replicas`",
    ),
    Prompt(
        "target_cpu_utilization",
        "Average CPU utilization (% of request) the autoscaler aims for",
        lambda raw, _: parse_int(raw, 10, 100),
        _constant("70"),
        "`70`",
        "10 to 100",
    ),
    Prompt(
        "image",
        "Container image the deployment runs",
        _parse_image,
        lambda v: f"ghcr.io/{v['team']}/{v['service']}:0.1.0",
        "`ghcr.io/<team>/<service>:0.1.0`",
        "an image reference: `registry/name:tag` or `name@sha256:...`",
    ),
    Prompt(
        "python_version",
        "Python version of CI and the image",
        _parse_python,
        _constant("3.11"),
        "`3.11`",
        "`3.11`, `3.12` or `3.13`",
    ),
    Prompt(
        "servinglib",
        "Where pip gets servinglib: a checkout directory, a .whl file or a requirement",
        _servinglib,
        lambda _: default_servinglib_source(),
        "the releases compatible with the installed servinglib, e.g. `servinglib>=0.2,<0.3`",
        "a servinglib checkout directory (built into a wheel in `wheels/`), a `.whl` file "
        "(copied into `wheels/`) or a requirement starting with `servinglib`, optionally "
        "after `--index-url <URL>`",
    ),
    Prompt(
        "prediction_sinks",
        "Where the prediction log streams: none, kafka, parquet (a lake in a bucket) or both",
        lambda raw, _: parse_sinks(raw),
        _constant("none"),
        "`none`",
        "`none`, `kafka`, `parquet` or `kafka,parquet`",
    ),
    Prompt(
        "kafka_bootstrap_servers",
        "Kafka bootstrap servers of the prediction topic (used with the kafka sink)",
        lambda raw, _: parse_bootstrap_servers(raw),
        _constant("kafka:9092"),
        "`kafka:9092`",
        "`host:port` pairs, comma-separated",
    ),
    Prompt(
        "kafka_topic",
        "Kafka topic of the prediction events (used with the kafka sink)",
        lambda raw, _: parse_topic(raw),
        lambda v: f"{v['service']}-predictions",
        "`<service>-predictions`",
        "a topic name: 1 to 249 letters, digits, `.`, `_` or `-`",
    ),
    Prompt(
        "lake_url",
        "Bucket URL of the Parquet prediction lake (used with the parquet sink)",
        lambda raw, _: parse_lake_url(raw),
        lambda v: f"s3://{v['team']}-predictions/{v['service']}",
        "`s3://<team>-predictions/<service>`",
        "`s3://BUCKET/PREFIX` or `gs://BUCKET/PREFIX`",
    ),
)

MODEL_PROMPTS: tuple[Prompt, ...] = (_MODEL, _RUNTIME)


def resolve_answers(
    prompts: Sequence[Prompt], given: Mapping[str, str], ask: AskFunction | None = None
) -> dict[str, Any]:
    """Parse ``given`` answers, fill the others from ``ask`` (or defaults), return the values.

    Without ``ask`` a missing required answer is an error; with it, a rejected interactive
    answer is asked again with the reason. Given answers are never asked again.

    Raises:
        SpecError: every unknown, invalid or missing answer, each naming its key and the fix.
    """
    keys = [prompt.key for prompt in prompts]
    problems = [_unknown(key, keys) for key in given if key not in keys]
    values: dict[str, Any] = {}
    for prompt in prompts:
        raw = given.get(prompt.key)
        if raw is not None:
            try:
                values[prompt.key] = prompt.parse(raw.strip(), values)
            except FieldError as e:
                problems.append(f"{prompt.key}: {e}")
            continue
        try:
            default = prompt.default(values)
        except KeyError:
            continue  # depends on an answer that was rejected; that one is reported
        if ask is not None:
            values[prompt.key] = _ask_until_valid(prompt, default, values, ask)
        elif default is None:
            problems.append(f"{prompt.key}: missing; pass {prompt.key}=VALUE ({prompt.question})")
        else:
            try:
                values[prompt.key] = prompt.parse(default, values)
            except FieldError as e:
                problems.append(f"{prompt.key}: the default {default!r} does not fit: {e}")
    if problems:
        raise SpecError(problems)
    return values


def _ask_until_valid(prompt: Prompt, default: str | None, values: Answers, ask: AskFunction) -> Any:
    error: str | None = None
    while True:
        answer = ask(prompt, default, error).strip() or default
        if not answer:
            error = "an answer is required"
            continue
        try:
            return prompt.parse(answer, values)
        except FieldError as e:
            error = str(e)


def _unknown(key: str, keys: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, keys, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{key}: unknown key; {hint}known keys: {', '.join(keys)}"
