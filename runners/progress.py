"""Progress events: how a long campaign tells its caller (terminal, bot, Actions log) where it is."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel


class ProgressEvent(BaseModel):
    """One step of a campaign; `done`/`total` count pairs or processes within the stage when known."""

    stage: str
    row: str | None = None
    detail: str = ""
    done: int | None = None
    total: int | None = None
    ratio: float | None = None
    """Performance pairs: this pair's candidate/baseline ratio of the gated timing field."""
    unix: float = 0.0


class ProgressSink(Protocol):
    def __call__(self, event: ProgressEvent) -> None: ...


def emit(sink: ProgressSink | None, stage: str, detail: str = "", *, row: str | None = None,
         done: int | None = None, total: int | None = None, ratio: float | None = None) -> None:
    """Send one event to an optional sink, stamping the time."""
    if sink is not None:
        sink(ProgressEvent(stage=stage, row=row, detail=detail, done=done, total=total, ratio=ratio,
                           unix=time.time()))




class JsonlProgress:
    """Append-only progress file a supervising process (the bot's local backend) can tail."""

    def __init__(self, path: Path, echo: ProgressSink | None = None) -> None:
        self.path = path
        self.echo = echo

    def __call__(self, event: ProgressEvent) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(event.model_dump()) + "\n")
        if self.echo is not None:
            self.echo(event)
