"""The webhook door's checks before anything is stored: the HMAC signature, computed while the body streams in,
and the bounds on what an unverified sender can make the service read, hold or parse.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import tempfile

from starlette.requests import ClientDisconnect, Request

MAX_BODY_BYTES = 25 * 1024 * 1024
"""GitHub caps webhook payloads at 25 MB; anything larger is not from GitHub."""
MAX_JSON_DEPTH = 64
"""GitHub's payloads nest about 10 deep; far deeper input only exercises the parser's recursion limit."""
SPOOL_BYTES = 256 * 1024
"""An unverified body beyond this is spooled to a temporary file instead of memory."""
SIGNATURE = re.compile(r"^sha256=([0-9a-f]{64})$")
_JSON_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
"""Strings (skipped whole, so brackets inside them do not count) and the brackets that open or close."""


def json_too_deep(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text opens more than `limit` nested arrays/objects (brackets inside strings do not
    count). Checked before parsing: a deep enough document makes json.loads raise RecursionError."""
    depth = 0
    for match in _JSON_TOKENS.finditer(body):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


class Refused(Exception):
    """A delivery answered with an error before it is stored; `status` and the message are the answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_signed_body(request: Request, secret: bytes, timeout: float) -> bytes:
    """The body, once its X-Hub-Signature-256 matched; the HMAC is computed while the body streams in.

    Refused before reading when the signature header is malformed or Content-Length is over the cap;
    while reading when it passes MAX_BODY_BYTES or `timeout`. Until the signature is checked the body is
    spooled to a temporary file past SPOOL_BYTES, so unauthenticated bulk does not sit in memory.
    """
    match = SIGNATURE.match(request.headers.get("x-hub-signature-256", ""))
    if match is None:
        raise Refused(401, "X-Hub-Signature-256 missing or wrong")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise Refused(413, f"payload over {MAX_BODY_BYTES} bytes")
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    size = 0
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        try:
            async with asyncio.timeout(timeout):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > MAX_BODY_BYTES:
                        raise Refused(413, f"payload over {MAX_BODY_BYTES} bytes")
                    mac.update(chunk)
                    spool.write(chunk)
        except TimeoutError:
            raise Refused(408, f"payload not received within {timeout:g} s") from None
        except ClientDisconnect:
            raise Refused(400, "client disconnected before the payload was complete") from None
        if not hmac.compare_digest(mac.hexdigest(), match.group(1)):
            raise Refused(401, "X-Hub-Signature-256 missing or wrong")
        spool.seek(0)
        return spool.read()
