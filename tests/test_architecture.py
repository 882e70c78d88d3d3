"""The layout keeps its promises: no import cycles anywhere in bot/ or runners/, and the campaign engine never
imports the GitHub side (runners/ runs on a bare runner with no bot state).

Every import counts, including those inside functions and under `if TYPE_CHECKING:`: a lazy import is still a
dependency, and a cycle hidden behind one is still a cycle a reader has to hold in their head.
"""

from __future__ import annotations

import ast
import re
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


def _third_party_imports(path: Path, top: str) -> bool:
    """Whether `path` imports the third-party package `top` (or a module of it), lazily or not."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == top for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == top:
            return True
    return False


GATEWAY_PARTS = ("bot.github.transport", "bot.github.reads", "bot.github.checks", "bot.github.issues",
                 "bot.github.actions")
"""What `bot.github.gateway.GitHubGateway` is composed of: nobody else builds a partial door to GitHub."""


def test_github_is_reached_only_through_the_gateway() -> None:
    pygithub = sorted(name for name, path in _modules().items()
                      if not name.startswith("bot.github.") and _third_party_imports(path, "github"))
    assert pygithub == [], "PyGithub is imported only behind the gateway (bot/github/)"
    outside = {name: sorted(set(targets) & set(GATEWAY_PARTS)) for name, targets in _graph().items()
               if not name.startswith("bot.github.")}
    assert {name: parts for name, parts in outside.items() if parts} == {}


def test_the_webhook_door_never_reaches_github_or_a_campaign() -> None:
    """What runs on the event loop or the ingest thread acknowledges fast: it imports no module that calls GitHub,
    publishes or runs campaigns (only the settings and the store)."""
    door = ("bot.service.signed_body", "bot.service.protocol", "bot.service.ingest")
    graph = _graph()
    reached = {name: sorted(t for t in graph[name] if t.startswith("bot") and t not in ("bot.settings", "bot.store")
                            and not t.startswith("bot.store.")) for name in door}
    assert reached == {name: [] for name in door}


def test_only_the_service_wiring_picks_a_dispatch_backend() -> None:
    backends = {"bot.dispatch.local", "bot.dispatch.actions", "bot.dispatch.slurm"}
    pickers = sorted(name for name, targets in _graph().items()
                     if targets & backends and not name.startswith("bot.dispatch."))
    assert pickers == ["bot.service.wiring"]
# --- runners/: layers, and a schema that starts nothing ---------------------------------------------------------

RUNNERS_LAYERS: tuple[dict[str, tuple[str, ...]], ...] = (
    {"pipeline": ("runners.pipeline",)},
    {"stages": ("runners.stages",), "sampler": ("runners.perf.sampler",)},
    {"exec": ("runners.exec",), "verify": ("runners.verify",)},
    {"gate": ("runners.perf.gate", "runners.perf.schedule", "runners.perf.stats")},
    {"schema": ("runners.schema",)},
)
"""runners/ from the top down: a group imports its own modules and the groups of lower layers only. A module in
no group is the top level (progress, resources, build_info, demo_trace, terminal, demo), which any group may use."""

PURE = ("runners.schema", "runners.perf.gate", "runners.perf.schedule", "runners.perf.stats", "runners.verify")
"""What `kv-parity verify` and every reader of a report stand on: none of it may start a process."""

SPAWNING_MODULES = {"subprocess", "multiprocessing", "pty", "concurrent.futures"}
SPAWNING_CALL = re.compile(r"posix_spawnp?|fork|forkpty|exec[lv]p?e?|spawn[lv]p?e?|system|popen")
"""`os` functions that start a process (os.fork, os.posix_spawn, os.execv, os.system, os.popen, ...)."""


def _group(module: str) -> tuple[int, str] | None:
    for layer, groups in enumerate(RUNNERS_LAYERS):
        for name, prefixes in groups.items():
            if any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes):
                return layer, name
    return None


def _spawns(source: str) -> list[str]:
    """How `source` could start a process: an import of a process module, or an `os` function that starts one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(f"import {a.name}" for a in node.names if a.name.split(".")[0] in {"subprocess",
                         "multiprocessing", "pty"} or a.name in SPAWNING_MODULES)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module in SPAWNING_MODULES or node.module.split(".")[0] in {"subprocess", "multiprocessing"}:
                found.append(f"from {node.module} import ...")
            elif node.module == "os":
                found.extend(f"from os import {a.name}" for a in node.names if SPAWNING_CALL.fullmatch(a.name))
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"
              and SPAWNING_CALL.fullmatch(node.attr)):
            found.append(f"os.{node.attr}")
    return found


def test_runners_layers_point_down() -> None:
    graph = _graph()
    upward = []
    for name, targets in graph.items():
        if not name.startswith("runners"):
            continue
        source = _group(name)
        for target in targets:
            destination = _group(target)
            if not target.startswith("runners") or destination is None:
                continue
            if source is None:
                if destination[1] != "schema":
                    upward.append(f"{name} (top level) -> {target} ({destination[1]})")
            elif destination[1] != source[1] and destination[0] <= source[0]:
                upward.append(f"{name} ({source[1]}) -> {target} ({destination[1]})")
    assert sorted(upward) == []


def test_the_schema_and_verify_start_no_process() -> None:
    """verify recomputes a report anywhere (a laptop, the bot): what it stands on reads and decides, never spawns."""
    graph = _graph()
    modules = _modules()
    reached: set[str] = set()
    todo = [name for name in graph if name.startswith(PURE)]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(graph[name])
    outside = sorted(name for name in reached if not name.startswith(PURE)
                     and name not in {"runners", "runners.resources"})
    assert outside == [], "the pure parts import process code"
    spawning = {name: _spawns(modules[name].read_text(encoding="utf-8")) for name in sorted(reached)}
    assert {name: ways for name, ways in spawning.items() if ways} == {}


def test_the_spawn_finder_finds_spawns() -> None:
    source = ("import subprocess\nimport os\nfrom os import posix_spawn, path\nfrom concurrent.futures import x\n"
              "os.fork()\nos.execvpe('a', [], {})\nos.path.join('a')\nos.system\n")
    assert sorted(_spawns(source)) == ["from concurrent.futures import ...", "from os import posix_spawn",
                                       "import subprocess", "os.execvpe", "os.fork", "os.system"]
    assert _spawns("import os\nos.read(0, 1)\nfrom runners.exec import sandbox\n") == []


def test_the_layer_table_names_every_runners_package() -> None:
    """A new sub-package of runners/ is placed in a layer on purpose, not left to the top level by default."""
    packages = {_module_name(path.parent) for path in (ROOT / "runners").rglob("__init__.py")} - {"runners"}
    placed = {prefix for groups in RUNNERS_LAYERS for prefixes in groups.values() for prefix in prefixes}
    unplaced = sorted(package for package in packages
                      if _group(package) is None and not any(p.startswith(package + ".") for p in placed))
    assert unplaced == []
# --- bot/'s layers (issue 39) --------------------------------------------------------------------------------

BOT_LAYERS: dict[str, frozenset[str]] = {
    "bot.exit_codes": frozenset(),
    "bot.settings": frozenset(),
    "bot.core": frozenset({"bot.settings"}),
    "bot.github": frozenset({"bot.core", "bot.settings"}),
    "bot.store": frozenset({"bot.core"}),
    "bot.dispatch": frozenset({"bot.core", "bot.github", "bot.settings", "bot.exit_codes"}),
    "bot.publish": frozenset({"bot.core", "bot.github"}),
    "bot.queue": frozenset({"bot.core", "bot.store"}),
    "bot.pages": frozenset(
        {"bot.core", "bot.github", "bot.store", "bot.dispatch", "bot.publish", "bot.queue", "bot.settings"}
    ),
}
"""Each layer of bot/ and the layers it may import besides itself, bottom first: the exit statuses of `kv-parity`
(the contract between the command line on top and the local backend, which reads a campaign's exit by it), the
core (the campaign model, the values its ports carry, the decisions) and the settings; GitHub and the SQLite store,
which know the core and not each other; the dispatch backends and publishing, on top of GitHub; the service's read
side (the queue estimate, the web pages). Every other bot module (the command line, the two modes, the service,
the lifecycle, metrics, logs) sits on top and may import any layer."""
SHARED_DISPATCH = frozenset({"bot.dispatch", "bot.dispatch.base", "bot.dispatch.clone", "bot.dispatch.artifact_zip",
                             "bot.dispatch.campaign_workflow"})
"""What every dispatch backend may share: the interface, the service's clone, and the campaign workflow's interface
and artifacts (which Actions-only mode reads too); the rest of bot/dispatch are backends."""


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
    graph = {"bot.store.campaigns": {"bot.core.campaign", "bot.github.gateway"}, "bot.modes.intake": {"bot.store.x"}}
    assert _sideways(graph) == [("bot.store.campaigns", "bot.github.gateway")]


# --- one command-line package (issue 39) ------------------------------------------------------------------------

PARSERS_OUTSIDE_THE_CLI = {
    "runners.exec.untrusted": "`python -m runners.exec.untrusted DIR`, the upload check the campaign workflow template "
                              "runs on a runner (copies of the template in users' repositories call it by that name)",
    "runners.exec.sandbox": "`add_sandbox_argument`, the one option helper the CLI calls, beside the sandbox kinds",
}


def test_every_parser_is_in_the_command_line_package() -> None:
    """bot/cli/ holds every command's parser and body; a domain module takes arguments, never an argv."""
    parsing = sorted(name for name, path in _modules().items()
                     if _third_party_imports(path, "argparse") and not name.startswith("bot.cli."))
    assert parsing == sorted(PARSERS_OUTSIDE_THE_CLI)


def _exit_statuses(path: Path) -> list[str]:
    """Module-level names `EXIT_*` bound to a number or a table of them (not `EXIT_SUFFIX`, a file name's end)."""
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        value = getattr(node, "value", None)
        names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name) and n.id.startswith("EXIT_")]
        if names and not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            found.extend(names)
    return found


def test_exit_statuses_are_defined_once() -> None:
    """In `bot/exit_codes.py`, below both the command line that returns them and the local backend that reads one."""
    defined = {name: _exit_statuses(path) for name, path in _modules().items()}
    assert {name: found for name, found in defined.items() if found and name != "bot.exit_codes"} == {}
    assert "EXIT_USAGE" in defined["bot.exit_codes"]


def test_only_the_command_line_imports_the_command_line() -> None:
    """The entry points sit on top: nothing below imports them."""
    importers = {name: sorted(t for t in targets if t.startswith("bot.cli"))
                 for name, targets in _graph().items() if not name.startswith("bot.cli")}
    assert {name: targets for name, targets in importers.items() if targets} == {}


def _reads_perf_threshold(source: str) -> bool:
    """Whether `source` reads `<anything>.perf.threshold` (a PerfConfig's threshold through a config)."""
    return any(isinstance(node, ast.Attribute) and node.attr == "threshold" and isinstance(node.value, ast.Attribute)
               and node.value.attr == "perf" for node in ast.walk(ast.parse(source)))


def test_the_bot_reads_a_reports_threshold_in_one_place() -> None:
    """Which performance threshold applies to a report is written once, `CampaignReport.perf_threshold`; every
    surface of the bot asks the report."""
    readers = sorted(name for name, path in _modules().items()
                     if name.startswith("bot") and _reads_perf_threshold(path.read_text(encoding="utf-8")))
    assert readers == []
    assert _reads_perf_threshold("x = report.config.perf.threshold")
    assert not _reads_perf_threshold("x = report.perf_threshold")
