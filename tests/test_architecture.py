"""The layout keeps its promises: no import cycles anywhere in bot/ or runners/, and the campaign engine never
imports the GitHub side (runners/ runs on a bare runner with no bot state).

Every import counts, including those inside functions and under `if TYPE_CHECKING:`: a lazy import is still a
dependency, and a cycle hidden behind one is still a cycle a reader has to hold in their head.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bot", "runners")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}


def _imports(path: Path, known: set[str]) -> set[str]:
    """The project modules `path` imports; `from pkg import mod` counts as importing pkg.mod when it is one."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if f"{node.module}.{alias.name}" in known:
                    found.add(f"{node.module}.{alias.name}")
                elif node.module in known:
                    found.add(node.module)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, known) - {name} for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_runners_never_import_the_bot() -> None:
    offenders = {name: sorted(t for t in targets if t.startswith("bot"))
                 for name, targets in _graph().items() if name.startswith("runners")}
    assert {name: targets for name, targets in offenders.items() if targets} == {}


# --- bot/'s layers (issue 39) --------------------------------------------------------------------------------

BOT_LAYERS: dict[str, frozenset[str]] = {
    "bot.settings": frozenset(),
    "bot.core": frozenset({"bot.settings"}),
    "bot.github": frozenset({"bot.core", "bot.settings"}),
    "bot.store": frozenset({"bot.core"}),
    "bot.dispatch": frozenset({"bot.core", "bot.github", "bot.settings"}),
    "bot.publish": frozenset({"bot.core", "bot.github"}),
    "bot.queue": frozenset({"bot.core", "bot.store"}),
    "bot.pages": frozenset(
        {"bot.core", "bot.github", "bot.store", "bot.dispatch", "bot.publish", "bot.queue", "bot.settings"}
    ),
}
"""Each layer of bot/ and the layers it may import besides itself, bottom first: the core (the campaign model, the
values its ports carry, the decisions) and the settings; GitHub and the SQLite store, which know the core and not
each other; the dispatch backends and publishing, on top of GitHub; the service's read side (the queue estimate,
the web pages). Every other bot module (the entry points and the two modes' adapters: cli, server, intake,
lifecycle, event_cli, track_cli, metrics, logs) sits on top and may import any layer."""
SHARED_DISPATCH = frozenset({"bot.dispatch", "bot.dispatch.base", "bot.dispatch.clone"})
"""What every dispatch backend may share: the interface and the service's clone; the rest of bot/dispatch are
backends."""


def _layer(module: str) -> str | None:
    return next((layer for layer in BOT_LAYERS if module == layer or module.startswith(f"{layer}.")), None)


def _sideways(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) for every import from a bot layer into a bot layer it may not import."""
    found = []
    for name in sorted(graph):
        layer = _layer(name)
        if layer is None:
            continue
        for target in sorted(graph[name]):
            if not target.startswith("bot"):
                continue
            other = _layer(target)
            if other != layer and other not in BOT_LAYERS[layer]:
                found.append((name, target))
    return found


def _imports_of(prefix: str) -> dict[str, set[str]]:
    return {name: targets for name, targets in _graph().items() if name == prefix or name.startswith(f"{prefix}.")}


def test_the_core_imports_neither_the_store_github_nor_publishing() -> None:
    """The campaign model and the decisions sit at the bottom: the store maps rows to the model, never the reverse,
    and GitHub is reached through the core's ports (`bot.core.ports`) with the core's own values."""
    offenders = {name: sorted(t for t in targets if t.startswith(("bot.store", "bot.github", "bot.publish")))
                 for name, targets in _imports_of("bot.core").items()}
    assert {name: targets for name, targets in offenders.items() if targets} == {}


def test_publishing_never_imports_the_store() -> None:
    """What the bot shows on GitHub works without the service's database (Actions-only mode has none)."""
    offenders = {name: sorted(t for t in targets if t.startswith("bot.store"))
                 for name, targets in _imports_of("bot.publish").items()}
    assert {name: targets for name, targets in offenders.items() if targets} == {}


def test_dispatch_backends_never_import_each_other() -> None:
    backends = {name: targets for name, targets in _imports_of("bot.dispatch").items() if name not in SHARED_DISPATCH}
    assert len(backends) >= 3, sorted(backends)
    offenders = {name: sorted(t for t in targets if t.startswith("bot.dispatch") and t not in SHARED_DISPATCH)
                 for name, targets in backends.items()}
    assert {name: targets for name, targets in offenders.items() if targets} == {}


def test_no_bot_layer_imports_sideways_or_up() -> None:
    assert _sideways(_graph()) == []


def test_the_layer_check_finds_a_sideways_import() -> None:
    graph = {"bot.store.campaigns": {"bot.core.campaign", "bot.github.gateway"}, "bot.intake": {"bot.store.x"}}
    assert _sideways(graph) == [("bot.store.campaigns", "bot.github.gateway")]
