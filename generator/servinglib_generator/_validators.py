"""Parsers for single answers: each returns the typed value or raises :class:`FieldError`.

Names end up as Kubernetes object names, namespaces, DNS names and file names, so only
RFC 1123 labels are accepted: lower-case letters, digits and '-', starting with a letter.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = [
    "FieldError",
    "parse_cpu",
    "parse_dns_label",
    "parse_int",
    "parse_memory",
    "parse_owners",
    "quantity_value",
    "suggest_dns_label",
]

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_CPU = re.compile(r"^(?:\d+m|\d+(?:\.\d{1,3})?)$")
_MEMORY = re.compile(r"^\d+(?:Ki|Mi|Gi|Ti|k|M|G|T)?$")
_MEMORY_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
_GITHUB_OWNER = re.compile(r"^@[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:/[A-Za-z0-9._-]+)?$")
_EMAIL = re.compile(r"^[^@\s,]+@[^@\s,]+\.[^@\s,]+$")


class FieldError(ValueError):
    """An answer is invalid; the message says why and how to fix it (without the key)."""


def suggest_dns_label(value: str, max_length: int = 63) -> str:
    """The closest valid DNS label to ``value``, for messages: ``"Eta_Team"`` → ``"eta-team"``."""
    label = re.sub(r"[^a-z0-9-]+", "-", value.lower())
    label = re.sub(r"-{2,}", "-", label).lstrip("-0123456789")[:max_length].rstrip("-")
    return label or "my-name"


def parse_dns_label(value: str, max_length: int = 63) -> str:
    """Accept a lower-case RFC 1123 label of at most ``max_length`` characters."""
    if len(value) > max_length:
        raise FieldError(
            f"{value!r} is {len(value)} characters long; use at most {max_length} "
            f"(e.g. {suggest_dns_label(value, max_length)!r})"
        )
    if not DNS_LABEL.match(value):
        raise FieldError(
            f"{value!r} is not a DNS-safe name; use lower-case letters, digits and '-', "
            f"starting with a letter and ending with a letter or digit "
            f"(e.g. {suggest_dns_label(value, max_length)!r})"
        )
    return value


def parse_int(value: str, minimum: int, maximum: int) -> int:
    """Accept a whole number in ``[minimum, maximum]``."""
    try:
        number = int(value)
    except ValueError:
        raise FieldError(f"{value!r} is not a whole number; write e.g. {minimum}") from None
    if not minimum <= number <= maximum:
        raise FieldError(f"{number} is out of range; use a number from {minimum} to {maximum}")
    return number


def parse_cpu(value: str) -> str:
    """Accept a Kubernetes CPU quantity: ``500m``, ``1`` or ``1.5``."""
    if not _CPU.match(value) or quantity_value(value, cpu=True) <= 0:
        raise FieldError(
            f"{value!r} is not a CPU quantity; use millicores like '500m' or cores like '2'"
        )
    return value


def parse_memory(value: str) -> str:
    """Accept a Kubernetes memory quantity such as ``512Mi`` or ``2Gi``."""
    if not _MEMORY.match(value) or quantity_value(value, cpu=False) <= 0:
        raise FieldError(
            f"{value!r} is not a memory quantity; use a number with a unit like '512Mi' or '2Gi'"
        )
    return value


def quantity_value(value: str, *, cpu: bool) -> Decimal:
    """The numeric value of a CPU (in cores) or memory (in bytes) quantity."""
    try:
        if cpu:
            return Decimal(value[:-1]) / 1000 if value.endswith("m") else Decimal(value)
        number = re.match(r"^\d+", value)
        if number is None:
            raise FieldError(f"{value!r} is not a memory quantity")
        return Decimal(number.group()) * _MEMORY_UNITS[value[number.end() :]]
    except (InvalidOperation, KeyError):
        raise FieldError(f"{value!r} is not a quantity") from None


def parse_owners(value: str) -> tuple[str, ...]:
    """Accept comma-separated GitHub owners (``@user``, ``@org/team``) or e-mail addresses."""
    owners = tuple(part.strip() for part in value.split(",") if part.strip())
    if not owners:
        raise FieldError("no owner given; name at least one, e.g. '@my-org/my-team'")
    for owner in owners:
        if not (_GITHUB_OWNER.match(owner) or _EMAIL.match(owner)):
            raise FieldError(
                f"{owner!r} is not an owner; use '@user', '@org/team' or an e-mail address, "
                "separated by commas"
            )
    return owners
