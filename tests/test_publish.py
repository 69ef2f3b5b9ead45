"""Publishing out/ (docs/output.md): never deletes what hpcobs did not write, atomic at every instant (crash
injected between any two steps, SIGTERM/SIGKILL of a real build), locked, readable, one-line errors."""

import builtins
import errno
import fcntl
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from hpcobs import cli
from hpcobs.build import outdir, pipeline
from tests.conftest import ROOT

OLD = {"a.txt": "old a\n", "gone/b.txt": "old b\n"}
NEW = {"a.txt": "new a\n", "d/e/c.txt": "new c\n"}


def tree(root):
    return outdir.read_tree(root)


def published(files):
    return {**{path: text.encode() for path, text in files.items()}, outdir.MARKER: outdir.MARKER_TEXT.encode()}


def siblings(out):
    """What lies beside out/ besides out/ itself: staging or previous trees a build left behind."""
    return sorted(name for name in os.listdir(out.parent) if name != out.name)


def no_check(root):
    pass


@pytest.fixture
def fast_cli(monkeypatch, generated):
    """cli.main with the default config's files already generated (generation is proven elsewhere)."""
    monkeypatch.setattr(pipeline, "generate", lambda config: generated)
    monkeypatch.setattr(pipeline, "budget_report", lambda config: [])

    def run(*args):
        return cli.main(["build", "--no-tool-checks", *map(str, args)])

    return run


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


# --- what may be replaced -------------------------------------------------------------------------------------


def test_a_directory_hpcobs_did_not_write_is_refused_and_kept(tmp_path, fast_cli, capsys):
    out = tmp_path / "site-data"
    (out / "keep").mkdir(parents=True)
    (out / "keep/notes.txt").write_text("mine")
    assert fast_cli("--out", out) == 2
    line = one_line(capsys)
    assert str(out) in line and "choose a new or empty directory" in line
    assert tree(out) == {"keep/notes.txt": b"mine"}
    assert siblings(out) == []


def test_an_empty_directory_is_accepted(tmp_path, fast_cli, generated):
    out = tmp_path / "out"
    out.mkdir()
    assert fast_cli("--out", out) == 0
    assert tree(out) == published(generated)


def test_a_previous_build_is_replaced_whole(tmp_path, fast_cli, generated):
    out = tmp_path / "out"
    assert fast_cli("--out", out) == 0
    (out / "left-over.txt").write_text("from an older version")
    assert fast_cli("--out", out) == 0
    assert tree(out) == published(generated)
    assert siblings(out) == []


def test_out_pointing_at_a_file_is_refused(tmp_path, fast_cli, capsys):
    out = tmp_path / "out"
    out.write_text("not a directory")
    assert fast_cli("--out", out) == 2
    assert str(out) in one_line(capsys)
    assert out.read_text() == "not a directory"


def test_check_expects_the_marker(tmp_path):
    outdir.write_tree(tmp_path, NEW)
    assert outdir.differences(tmp_path, NEW) == [f"{outdir.MARKER}: missing from out/"]
    outdir.publish(tmp_path / "out", NEW, no_check)
    assert outdir.differences(tmp_path / "out", NEW) == []


# --- what is published ----------------------------------------------------------------------------------------


def test_out_is_readable_by_other_users_whatever_the_umask(tmp_path, generated):
    out = tmp_path / "out"
    previous = os.umask(0o077)
    try:
        outdir.publish(out, generated, no_check)
    finally:
        os.umask(previous)
    modes = {path: stat.S_IMODE(path.stat().st_mode) for path in [out, *out.rglob("*")]}
    assert {oct(m) for p, m in modes.items() if p.is_dir()} == {"0o755"}
    assert {oct(m) for p, m in modes.items() if p.is_file()} == {"0o644"}


def test_a_symlinked_out_keeps_its_link(tmp_path):
    real = tmp_path / "volume" / "hpcobs"
    outdir.publish(real, OLD, no_check)
    link = tmp_path / "repo" / "out"
    link.parent.mkdir()
    link.symlink_to(real)
    outdir.publish(link, NEW, no_check)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert tree(real) == published(NEW)
    assert siblings(link) == [] and siblings(real) == []


# --- a crash between any two steps ----------------------------------------------------------------------------

# Every filesystem call publishing makes; a crash is injected at the 1st, 2nd, ... of them in turn.
STEPS = [
    (os, "mkdir"),
    (os, "open"),
    (builtins, "open"),
    (os, "fchmod"),
    (os, "chmod"),
    (os, "fsync"),
    (outdir, "_rename_exchange"),
    (os, "rename"),
    (os, "unlink"),
    (os, "rmdir"),
]


@contextmanager
def crash_at(step, crash, monkeypatch):
    """Call crash(name) at the step-th filesystem call; yield the calls made, and whether the crash hit the
    removal of a tree (the one failure that leaves debris, for the next build to remove)."""
    calls, removing, removals = [], [], []
    with monkeypatch.context() as patch:
        for module, name in STEPS:
            # Defaults bind this iteration's function and name (a closure would see the last ones).
            def counted(*args, _real=getattr(module, name), _name=name, **kwargs):  # noqa: B008
                calls.append(_name)
                if len(calls) == step:
                    removing.append(bool(removals))
                    crash(_name)
                return _real(*args, **kwargs)

            patch.setattr(module, name, counted)

        def rmtree(*args, _real=shutil.rmtree, **kwargs):
            removals.append(1)
            try:
                return _real(*args, **kwargs)
            finally:
                removals.pop()

        patch.setattr(shutil, "rmtree", rmtree)
        yield calls, removing


def raise_oserror(name):
    raise OSError(errno.EIO, f"injected failure in {name}")


def fallback_only(monkeypatch):
    """A filesystem without RENAME_EXCHANGE (NFS): publishing falls back to two renames."""

    def refuse(a, b):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), str(a))

    monkeypatch.setattr(outdir, "_rename_exchange", refuse)


def start(tmp_path, before):
    out = tmp_path / "out"
    tmp_path.mkdir()
    if before == "previous build":
        outdir.publish(out, OLD, no_check)
    return out, (published(OLD) if before == "previous build" else {})


def count_steps(tmp_path, monkeypatch):
    out = tmp_path / "count" / "out"
    outdir.publish(out, OLD, no_check)
    with crash_at(0, raise_oserror, monkeypatch) as (calls, _):
        outdir.publish(out, NEW, no_check)
    shutil.rmtree(out.parent)
    return len(calls)


@pytest.mark.parametrize("before", ["previous build", "no out/ yet"])
@pytest.mark.parametrize("swap", ["exchange", "two renames"])
def test_a_failure_at_any_step_leaves_the_old_or_the_new_tree(tmp_path, monkeypatch, before, swap):
    if swap == "two renames":
        fallback_only(monkeypatch)
    steps = count_steps(tmp_path, monkeypatch)
    assert steps > 20
    for step in range(1, steps + 1):
        out, old = start(tmp_path / str(step), before)
        with crash_at(step, raise_oserror, monkeypatch) as (calls, removing):
            try:
                outdir.publish(out, NEW, no_check)
            except outdir.PublishError as exc:
                assert "injected failure" in str(exc) and "\n" not in str(exc)
        assert tree(out) in (old, published(NEW)), (step, calls[-1])
        if siblings(out):  # only a failed removal leaves debris; the next build removes it
            assert removing == [True], (step, calls[-1], siblings(out))
            outdir.publish(out, NEW, no_check)
        assert siblings(out) == [], (step, calls[-1])


@pytest.mark.parametrize("swap", ["exchange", "two renames"])
def test_a_build_killed_at_any_step_is_repaired_by_the_next(tmp_path, monkeypatch, swap):
    """The build process dies (os._exit, as under SIGKILL) at each step in turn, without any cleanup."""
    if swap == "two renames":
        fallback_only(monkeypatch)
    steps = count_steps(tmp_path, monkeypatch)
    for step in range(1, steps + 1):
        out, old = start(tmp_path / str(step), "previous build")
        pid = os.fork()
        if pid == 0:
            try:
                with crash_at(step, lambda name: os._exit(70), monkeypatch):
                    outdir.publish(out, NEW, no_check)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        if swap == "exchange" or out.exists():
            assert tree(out) in (old, published(NEW)), step
        else:  # killed between the two renames: the previous tree waits aside, and the next build restores it
            assert any(name.startswith(".out.old-") for name in siblings(out)), step
        outdir.publish(out, NEW, no_check)
        assert tree(out) == published(NEW) and siblings(out) == [], step


def plant(path: Path, kind: str, elsewhere: Path) -> None:
    """Something under a debris name that no build made, dated later than any build's tree so that it would be
    the one restored."""
    if kind == "link to a directory":
        path.symlink_to(elsewhere, target_is_directory=True)
    elif kind == "dangling link":
        path.symlink_to(elsewhere / "nowhere")
    else:
        path.write_text("not a build\n")
    later = time.time() + 3600
    os.utime(path, (later, later), follow_symlinks=False)


def as_found(path: Path) -> tuple:
    """What a planted entry is, without following it."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return "link", os.readlink(path)
    return "file", path.read_text()


@pytest.mark.parametrize("out_was", ["in place", "left aside by a killed build"])
@pytest.mark.parametrize("planted", ["link to a directory", "dangling link", "file"])
def test_what_no_build_left_under_a_debris_name_is_never_followed_restored_or_removed(tmp_path, planted, out_was):
    """Only a real directory is a killed build's debris: a `.out.old-*` or `.out.new-*` symlink or file beside
    out/ is left as it is and never becomes out/, and the directory a link points to is not touched, also when
    the build restores the tree a killed build left aside."""
    out = tmp_path / "out"
    outdir.publish(out, OLD, no_check)
    if out_was == "left aside by a killed build":  # between the two renames of the fallback swap
        os.rename(out, tmp_path / ".out.old-0123456789ab")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "sentinel").write_text("keep\n")
    later = time.time() + 3600
    os.utime(elsewhere, (later, later))
    planted_paths = [tmp_path / ".out.old-ffffffffffff", tmp_path / ".out.new-planted"]
    for path in planted_paths:
        plant(path, planted, elsewhere)
    found = [as_found(path) for path in planted_paths]
    during = []
    outdir.publish(out, NEW, lambda staging: during.append((out.is_symlink(), tree(out))))
    assert during == [(False, published(OLD))]
    assert not out.is_symlink() and tree(out) == published(NEW)
    assert os.listdir(elsewhere) == ["sentinel"] and (elsewhere / "sentinel").read_text() == "keep\n"
    assert [as_found(path) for path in planted_paths] == found
    assert siblings(out) == sorted(["elsewhere", *(path.name for path in planted_paths)])


# --- the filesystem refuses -----------------------------------------------------------------------------------


def refusing(monkeypatch, under, module, name, code):
    """Make module.name fail with errno code on every path under a directory, as the kernel would."""
    real = getattr(module, name)

    def call(path, *args, **kwargs):
        if str(path).startswith(str(under)):
            raise OSError(code, os.strerror(code), str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(module, name, call)


def full_disk_on_third_file(monkeypatch, under):
    """ENOSPC surfaces on write, from a buffered file object that names no file."""
    real, opened = builtins.open, []

    class Full:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def fileno(self):
            return self.handle.fileno()

        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fake_open(path, *args, **kwargs):
        handle = real(path, *args, **kwargs)
        if str(path).startswith(str(under)):
            opened.append(path)
            return Full(handle) if len(opened) == 3 else handle
        return handle

    monkeypatch.setattr(builtins, "open", fake_open)


@pytest.mark.parametrize(
    "fault, code",
    [
        (lambda mp, under: refusing(mp, under, os, "mkdir", errno.EROFS), errno.EROFS),
        (lambda mp, under: refusing(mp, under, os, "mkdir", errno.EACCES), errno.EACCES),
        (full_disk_on_third_file, errno.ENOSPC),
        (lambda mp, under: refusing(mp, under, outdir, "_rename_exchange", errno.EACCES), errno.EACCES),
        (lambda mp, under: refusing(mp, under, os, "open", errno.EACCES), errno.EACCES),
    ],
    ids=[
        "read-only",
        "permission denied on staging",
        "disk full",
        "permission denied on exchange",
        "permission denied on lock",
    ],
)
def test_a_refusing_filesystem_gives_one_line_and_keeps_out(
    tmp_path, fast_cli, generated, capsys, monkeypatch, fault, code
):
    out = tmp_path / "out"
    assert fast_cli("--out", out) == 0
    capsys.readouterr()
    fault(monkeypatch, tmp_path)
    assert fast_cli("--out", out) == 1
    monkeypatch.undo()
    line = one_line(capsys)
    assert os.strerror(code) in line and str(tmp_path) in line and f"{out} is unchanged" in line
    assert tree(out) == published(generated)
    assert siblings(out) == []


def build_in_namespace(tmp_path, script):
    """Run a shell script in a private mount namespace (mounts vanish with it); skip where that is not allowed."""
    probe = subprocess.run(["unshare", "-m", "mount", "-t", "tmpfs", "tmpfs", str(tmp_path)], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount in a private namespace here: {probe.stderr.decode().strip()}")
    return subprocess.run(["unshare", "-m", "sh", "-ec", script], capture_output=True, text=True, timeout=120)


REAL_FS = """
mount -t tmpfs -o size={size} tmpfs {dir}
mkdir {dir}/out
printf '%s' '{marker}' > {dir}/out/{marker_name}
echo old > {dir}/out/old.txt
{then}
set +e
{python} {build} --no-tool-checks --out {dir}/out > /dev/null
echo "exit $?"
ls -A {dir} {dir}/out
"""


@pytest.mark.parametrize(
    "case, size, then, code",
    [
        ("read-only", "1m", "mount -o remount,ro {dir}", errno.EROFS),
        ("disk full", "64k", "", errno.ENOSPC),
    ],
)
def test_a_real_refusing_filesystem(tmp_path, case, size, then, code):
    script = REAL_FS.format(
        size=size,
        then=then.format(dir=tmp_path),
        dir=tmp_path,
        marker=outdir.MARKER_TEXT,
        marker_name=outdir.MARKER,
        python=sys.executable,
        build=ROOT / "build.py",
    )
    result = build_in_namespace(tmp_path, script)
    assert "exit 1" in result.stdout, result.stdout + result.stderr
    assert len(result.stderr.splitlines()) == 1 and os.strerror(code) in result.stderr, result.stderr
    listing = result.stdout.split("exit 1\n")[1]
    assert listing == f"{tmp_path}:\nout\n\n{tmp_path}/out:\n{outdir.MARKER}\nold.txt\n", listing


def test_a_real_permission_denied(tmp_path):
    """A parent directory the build may not write to, as root without CAP_DAC_OVERRIDE."""
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is not installed")
    parent = tmp_path / "readonly"
    outdir.publish(parent / "out", OLD, no_check)
    parent.chmod(0o555)
    result = subprocess.run(
        [
            "setpriv",
            "--bounding-set=-dac_override,-dac_read_search,-fowner",
            "--inh-caps=-all",
            sys.executable,
            str(ROOT / "build.py"),
            "--no-tool-checks",
            "--out",
            str(parent / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    parent.chmod(0o755)
    assert result.returncode == 1, result.stderr
    assert len(result.stderr.splitlines()) == 1 and os.strerror(errno.EACCES) in result.stderr
    assert str(parent) in result.stderr
    assert tree(parent / "out") == published(OLD) and siblings(parent / "out") == []


# --- concurrent builds ----------------------------------------------------------------------------------------


def test_concurrent_builds_take_turns(tmp_path, generated):
    """While another build holds the lock, two more wait (saying so), then both publish a complete tree."""
    out = tmp_path / "out"
    holder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    builds = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "build.py"), "--no-tool-checks", "--out", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for build in builds:
            assert build.stderr.readline() == f"waiting for another build into {out} to finish\n"
        assert not out.exists()
    finally:
        os.close(holder)
    for build in builds:
        assert build.wait(timeout=120) == 0, build.stderr.read()
        build.stdout.close()
        build.stderr.close()
    assert tree(out) == published(generated)
    assert siblings(out) == []


# --- signals --------------------------------------------------------------------------------------------------


def processes_tagged(tag: str) -> list[str]:
    """Command lines of live processes started with our tag in their environment (the build and its tools)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if f"HPCOBS_TEST_RUN={tag}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            pass
    return found


def wait_for(condition, seconds, every=0.05):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(every)
    return condition()


# Each run: a signal, whether promtool runs, the moment the delay counts from and the delay's range. Seeded
# delays spread the signals over the start, the rule tests (promtool children running) and publishing.
RUNS = [
    (signal.SIGTERM, True, "start", (0.5, 4)),
    (signal.SIGTERM, True, "rule tests run", (0, 2)),
    (signal.SIGTERM, False, "staging appears", (0, 3)),
    (signal.SIGTERM, False, "staging appears", (0, 3)),
    (signal.SIGKILL, True, "rule tests run", (0, 2)),
    (signal.SIGKILL, False, "staging appears", (0, 3)),
]


def test_signals_at_random_moments_of_a_real_build(tmp_path, generated):
    out = tmp_path / "out"
    outdir.publish(out, generated, no_check)
    new = tree(out)
    rng = random.Random(10)
    moments = {
        "start": lambda tag: True,
        "rule tests run": lambda tag: any("promtool test rules" in c for c in processes_tagged(tag)),
        "staging appears": lambda tag: any(name.startswith(".out.new-") for name in siblings(out)),
    }
    for signum, with_tools, since, delays in RUNS:
        (out / "from-the-previous-build.txt").write_text("old\n")
        old = tree(out)
        tag = uuid.uuid4().hex
        # --no-cache: cached results would let a build finish before its tools ever run
        build = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "build.py"),
                "--out",
                str(out),
                "--no-cache",
                *([] if with_tools else ["--no-tool-checks"]),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "HPCOBS_TEST_RUN": tag},
        )
        # wait_for calls its lambdas before the loop moves on: they see this iteration's values.
        assert wait_for(lambda: moments[since](tag), 90, every=0.001), since  # noqa: B023
        delay = rng.uniform(*delays)
        time.sleep(delay)
        build.send_signal(signum)
        signalled = time.monotonic()
        stderr = build.communicate(timeout=60)[1]
        # a promtool test file takes seconds to tens of seconds: a prompt exit means the build killed them
        assert time.monotonic() - signalled < 5, "the build waited for its tools instead of stopping them"
        moment = f"{signum.name} {delay:.3f}s after {since}"
        assert tree(out) in (old, new), moment
        if signum == signal.SIGTERM:
            # 143 after cleanup; -15 if it came before the handler was installed (nothing written yet); 0 if late
            assert build.returncode in (143, -15, 0), (moment, build.returncode, stderr)
            if build.returncode == 143:
                assert len(stderr.splitlines()) == 1 and "interrupted by SIGTERM" in stderr, (moment, stderr)
            assert siblings(out) == [], moment
            assert processes_tagged(tag) == [], moment
        else:
            assert build.returncode in (-9, 0), moment  # 0: it had finished
            assert wait_for(lambda: processes_tagged(tag) == [], 5), (moment, processes_tagged(tag))  # noqa: B023
            subprocess.run(
                [sys.executable, str(ROOT / "build.py"), "--no-tool-checks", "--out", str(out)],
                check=True,
                capture_output=True,
                timeout=120,
            )
            assert siblings(out) == [], moment
            assert tree(out) == new, moment
