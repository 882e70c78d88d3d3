"""How the service logs: text for a person at a terminal (the default), or one JSON object per line for a log
pipeline (`kv-parity serve --log-format json`, settings `log_format`), both through the standard `logging` module.

Every line logged while the worker handles a delivery or works on a campaign carries what it concerns: the
delivery id, campaign id, repository and pull request (`log_context`), as fields of the JSON object, or appended
in brackets to a text line. An expected, handled failure (GitHub asked to retry later, or did not answer; the
work is retried) is logged as one line; anything else keeps its traceback (`log_failure`), so the errors an
operator must read are not buried under retries.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Literal, TextIO

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.github.errors import TRANSIENT_ERRORS

LogFormat = Literal["text", "json"]
CONTEXT_FIELDS = ("delivery_id", "campaign_id", "repo", "pr")
"""What a line concerns, in this order; a field is present only on the lines that concern it."""
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_CONTEXT: ContextVar[Mapping[str, object]] = ContextVar("kv_parity_log_context", default=MappingProxyType({}))


@contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Attach `fields` (those that are not None) to every record logged inside the block, on this thread."""
    token = _CONTEXT.set({**_CONTEXT.get(), **{key: value for key, value in fields.items() if value is not None}})
    try:
        yield
    finally:
        _CONTEXT.reset(token)


class ContextFilter(logging.Filter):
    """Copies the current `log_context` onto each record (a field given with `extra=` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _CONTEXT.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class TextFormatter(logging.Formatter):
    """The terminal's format, with what the line concerns in brackets at its end."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = [f"{key}={getattr(record, key)}" for key in CONTEXT_FIELDS if hasattr(record, key)]
        if not fields:
            return text
        first, newline, rest = text.partition("\n")
        return f"{first} [{' '.join(fields)}]{newline}{rest}"


def json_formatter() -> logging.Formatter:
    """python-json-logger's formatter: time, level, logger and message, the context fields, and a traceback (one
    string, newlines escaped, so one record stays one line)."""
    from pythonjsonlogger.core import RESERVED_ATTRS
    from pythonjsonlogger.json import JsonFormatter

    return JsonFormatter(
        "{asctime}{levelname}{name}{message}",
        style="{",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        reserved_attrs=[*RESERVED_ATTRS, "color_message"],  # uvicorn's coloured copy of the message
    )


def configure_logging(level: str, log_format: LogFormat, stream: TextIO | None = None) -> None:
    """One handler on the root logger, in the chosen format, for every logger of the process (uvicorn's too when
    it is told not to configure its own: `bot.service.protocol.uvicorn_config`)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(json_formatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def log_failure(logger: logging.Logger, exc: BaseException, message: str, *args: object) -> None:
    """Log a failure the caller handled: one warning line when it is expected (GitHub asked to retry later or did
    not answer, and the work is tried again), an error with its traceback otherwise."""
    if isinstance(exc, TRANSIENT_ERRORS):
        logger.warning(f"{message}: %s: %s", *args, type(exc).__name__, exc)
    else:
        logger.error(message, *args, exc_info=exc)


class _Number(BaseModel):
    model_config = ConfigDict(extra="ignore")
    number: int | None = None


class _Repository(BaseModel):
    model_config = ConfigDict(extra="ignore")
    full_name: str | None = None


class _Checks(BaseModel):
    model_config = ConfigDict(extra="ignore")
    pull_requests: list[_Number] = []


class _Concerns(BaseModel):
    """The parts of any webhook payload that say which repository and pull request it is about (each optional:
    events differ, and a field an event lacks only leaves the line without it)."""

    model_config = ConfigDict(extra="ignore")
    repository: _Repository | None = None
    pull_request: _Number | None = None
    issue: _Number | None = None
    check_run: _Checks | None = None
    check_suite: _Checks | None = None
    number: int | None = None


def delivery_concerns(payload: bytes) -> dict[str, object]:
    """`repo` and `pr` of a stored delivery for `log_context`, from whichever field its event carries them in."""
    try:
        found = _Concerns.model_validate_json(payload)
    except ValidationError:
        return {}
    pulls = [
        *(p.number for p in (found.pull_request, found.issue) if p is not None),
        *(c.pull_requests[0].number for c in (found.check_run, found.check_suite) if c and c.pull_requests),
        found.number,
    ]
    return {
        "repo": found.repository.full_name if found.repository else None,
        "pr": next((number for number in pulls if number is not None), None),
    }
