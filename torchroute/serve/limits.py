"""Bounds on what one HTTP request may ask of the router."""

from __future__ import annotations

from dataclasses import dataclass

from torchroute.checks import check_number
from torchroute.errors import LimitError as LimitError


@dataclass(frozen=True)
class Limits:
    """Upper bounds of a request; each breach is a one-line 413 or 422.

    Args:
        max_body_bytes: size of a request body (413).
        max_batch: queries in one ``/route`` call or ids in one ``/feedback`` call (413).
        max_prompt_chars: characters of one prompt (422).
        max_id_chars: characters of one request id (422).
    """

    max_body_bytes: int = 1 << 20
    max_batch: int = 256
    max_prompt_chars: int = 20_000
    max_id_chars: int = 64

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_batch", "max_prompt_chars", "max_id_chars"):
            check_number("Limits", name, getattr(self, name), ge=1, integer=True)


def check_batch(field: str, values: list | None, limits: Limits, flag: str) -> None:
    """At most ``limits.max_batch`` entries in ``values`` (413 naming ``field`` and ``flag``)."""
    if values is not None and len(values) > limits.max_batch:
        raise LimitError(
            f"{field} has {len(values)} entries; at most {limits.max_batch} per call ({flag})"
        )


def check_strings(field: str, values: list[str] | None, most: int, flag: str) -> None:
    """Each string has at most ``most`` characters and is valid Unicode (422)."""
    for i, text in enumerate(values or ()):
        if len(text) > most:
            raise LimitError(
                f"{field}.{i} has {len(text)} characters; at most {most} ({flag})", 422
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise LimitError(
                f"{field}.{i} is not valid Unicode (a lone surrogate at position {exc.start})",
                422,
            ) from None
