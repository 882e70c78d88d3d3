"""A tiny headless-Chromium driver for tests: the Chrome DevTools Protocol over `--remote-debugging-pipe`.

No websocket, Selenium or Playwright: Chromium reads NUL-terminated JSON commands from its fd 3 and writes
responses and events to its fd 4. Every call has a timeout and fails with the method's name; waiting is
event-driven (a reader thread queues every message), never a sleep. Network is off: a dead proxy for every
non-loopback request, no background networking, and each page records what it tried to fetch.

    with Browser() as browser:
        page = browser.open("file:///tmp/report.html", width=390, height=844, mobile=True)
        assert not page.console_errors and not page.exceptions
        page.evaluate("document.title")
        page.screenshot(Path("shot.png"))
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--no-default-browser-check",
    "--no-first-run",
    "--mute-audio",
    "--hide-scrollbars",
    "--proxy-server=http://127.0.0.1:9",
    "--remote-debugging-pipe",
)
"""`--proxy-server` points at a closed port: anything but loopback (which Chromium never proxies) fails."""
DEFAULT_TIMEOUT = 120.0
"""Seconds a DevTools call may take before it fails naming its method: a bound on a hang, not a speed test. A
suite once saw this VM's disk stall for 30 s (both cores in I/O wait) while Chromium started, past the 30 s
this bound used to be."""


class BrowserError(RuntimeError):
    """Chromium is missing, died, or did not answer a call in time (the message names the call)."""


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise BrowserError(
            "chromium is not installed: install chromium (apt-get install -y chromium); .ci/run installs it"
        )
    return path


@dataclass
class PageResult:
    """One loaded page: what it logged, threw and requested, and a handle to evaluate or screenshot it."""

    url: str
    session_id: str
    browser: Browser
    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def evaluate(self, expression: str) -> Any:
        """The JSON value of `expression` in the page; raises with the page's exception text if it threw."""
        result = self.browser.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session_id=self.session_id,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"Runtime.evaluate({expression[:60]!r}) threw: {text}")
        return result["result"].get("value")

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        """A PNG of the page (the whole scroll height when `full_page`)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            metrics = self.browser.call("Page.getLayoutMetrics", session_id=self.session_id)
            size = metrics["cssContentSize"]
            params.update(
                captureBeyondViewport=True,
                clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
            )
        data = self.browser.call("Page.captureScreenshot", params, session_id=self.session_id)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self.browser.close_page(self)


class Browser:
    """A headless Chromium process driven over the DevTools pipe; use as a context manager."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._profile: tempfile.TemporaryDirectory[str] | None = None
        self._send_fd = -1
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._events: list[dict[str, Any]] = []
        self._next_id = 0
        self._targets: dict[str, str] = {}

    # --- process ---------------------------------------------------------------------------------------

    def __enter__(self) -> Browser:
        binary = chromium_path()
        self._profile = tempfile.TemporaryDirectory(prefix="kv-parity-chromium-", ignore_cleanup_errors=True)
        to_child, from_parent = os.pipe()
        to_parent, from_child = os.pipe()
        # Four new descriptors take the lowest free numbers, so 3 and 4 are open here and pass_fds may name
        # them; the child moves its pipe ends onto them before exec (Chromium's fixed fd 3 in, fd 4 out).
        sources = (to_child, from_child)

        def onto_3_and_4() -> None:
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in sources]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        try:
            self._process = subprocess.Popen(
                [binary, *FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(3, 4),
                preexec_fn=onto_3_and_4,
                start_new_session=True,
            )
        finally:
            os.close(to_child)
            os.close(from_child)
        self._send_fd = from_parent
        threading.Thread(target=self._read, args=(to_parent,), daemon=True).start()
        self.call("Target.setDiscoverTargets", {"discover": False})
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Ask Chromium to close (it was never asked before: the process was forgotten first, so every close
        waited out the 10 s timeout), then end whatever is left of its process group before removing the
        profile its helper processes write to."""
        process = self._process
        if process is None:
            return
        with contextlib.suppress(BrowserError):
            self.call("Browser.close", timeout=5.0)
        self._process = None
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        os.close(self._send_fd)
        if self._profile is not None:
            self._profile.cleanup()

    def _read(self, fd: int) -> None:
        """Split fd 4's stream on NUL into JSON messages; None marks the end (Chromium exited)."""
        buffer = b""
        with os.fdopen(fd, "rb", buffering=0) as stream:
            while chunk := stream.read(65536):
                buffer += chunk
                *messages, buffer = buffer.split(b"\0")
                for message in messages:
                    self._messages.put(json.loads(message))
        self._messages.put(None)

    # --- protocol --------------------------------------------------------------------------------------

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session_id: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one command and wait for its response; events that arrive meanwhile are kept."""
        if self._process is None:
            raise BrowserError(f"{method}: the browser is not running")
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session_id is not None:
            message["sessionId"] = session_id
        os.write(self._send_fd, json.dumps(message).encode() + b"\0")
        reply = self._wait(lambda m: m.get("id") == message["id"], f"{method}", timeout)
        if "error" in reply:
            raise BrowserError(f"{method} failed: {reply['error'].get('message')} ({reply['error']})")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def _wait(self, matches: Any, what: str, timeout: float | None) -> dict[str, Any]:
        seconds = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + seconds
        for event in self._events:
            if matches(event):
                self._events.remove(event)
                return event
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrowserError(f"{what}: no answer from chromium within {seconds:g} s")
            try:
                message = self._messages.get(timeout=remaining)
            except queue.Empty:
                continue
            if message is None:
                self._messages.put(None)
                raise BrowserError(f"{what}: chromium exited (code {self._exit_code()})")
            if matches(message):
                return message
            if "method" in message:
                self._events.append(message)

    def _exit_code(self) -> int | None:
        return self._process.poll() if self._process is not None else None

    # --- pages -----------------------------------------------------------------------------------------

    def open(self, url: str, *, width: int = 1280, height: int = 900, mobile: bool = False) -> PageResult:
        """Load `url` in a new tab at the given viewport and wait for its load event."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self._targets[session] = target
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session_id=session)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
            session_id=session,
        )
        self._events = [e for e in self._events if e.get("sessionId") != session]
        navigation = self.call("Page.navigate", {"url": url}, session_id=session)
        if navigation.get("errorText"):
            raise BrowserError(f"Page.navigate({url}) failed: {navigation['errorText']}")
        self._wait(
            lambda m: m.get("method") == "Page.loadEventFired" and m.get("sessionId") == session,
            f"Page.loadEventFired for {url}",
            None,
        )
        page = PageResult(url=url, session_id=session, browser=self)
        self._collect(page)
        return page

    def _collect(self, page: PageResult) -> None:
        """Move the page's console errors, exceptions and requests out of the event buffer."""
        kept: list[dict[str, Any]] = []
        for event in self._events:
            if event.get("sessionId") != page.session_id:
                kept.append(event)
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                page.console_errors.append(
                    " ".join(str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", []))
                )
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                page.exceptions.append(
                    str(details.get("exception", {}).get("description") or details.get("text", ""))
                )
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                page.console_errors.append(f"{entry.get('source')}: {entry.get('text')} ({entry.get('url', '')})")
            elif method == "Network.requestWillBeSent":
                page.requests.append(str(params.get("request", {}).get("url", "")))
        self._events = kept

    def close_page(self, page: PageResult) -> None:
        target = self._targets.pop(page.session_id, None)
        if target is not None:
            self.call("Target.closeTarget", {"targetId": target})
