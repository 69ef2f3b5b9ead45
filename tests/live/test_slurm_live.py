"""The job-attribution chain on a real Slurm, node_exporter and Prometheus (docs/slurm.md).

A one-node Slurm cluster (Debian's slurm-wlm and munge, started here as children on loopback, with their own
configuration and state in a temporary directory) has 4 GPUs as GRES backed by character devices, shards on the
last one, and slurm/prolog and slurm/epilog installed as its Prolog and Epilog. Real jobs then run: two at once
(one of them cancelled, one failing), two sharing a GPU, three owned by two users in two accounts. While they run
the mapping and job-info files must say who holds which GPU, and after they end the files must be empty or gone.
For the last case a real node_exporter reads the textfile directory and a real Prometheus scrapes it, next to a
stand-in for dcgm-exporter that serves GPU series for the mapping files the prolog wrote, the way dcgm-exporter
reads them (the one part that needs a GPU); the generated recording rules must give the right GPUs per job, user
and account. The test skips, with slurmd's reason, only where slurmd cannot start.
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from hpcobs.authoring.context import Context
from hpcobs.build import pipeline
from hpcobs.exporters.labels import dcgm_gpu_labels
from hpcobs.exporters.sources import Sources
from hpcobs.proof.servers import ExpositionServer, Prometheus, free_port
from hpcobs.targets.prometheus import RULES_DIR
from tests.conftest import MEASUREMENT, ROOT

pytestmark = pytest.mark.live

SLURM_COMMANDS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scancel", "scontrol", "squeue", "sinfo")
NODE_EXPORTER = "prometheus-node-exporter"
PACKAGES = "apt-get install -y slurm-wlm munge prometheus-node-exporter"
GPUS = 4
SHARDS = 8
PARTITION = "gpu"
NOBODY = "nobody"
# A job name that needs every escape of the text format, and that `scontrol show job -o` prints unquoted.
JOB_NAME = 'llama "70b" \\ run'
WAIT = 30.0
POLL = 0.1
RULE_INTERVAL = "1s"


def _die_with_parent() -> None:
    """In a daemon: its own process group (stopped as one), and SIGTERM when the test process dies."""
    os.setsid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def wait_until(condition: Callable[[], object], what: str, timeout: float = WAIT) -> object:
    """Poll `condition` until it returns something true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not reached after {timeout:.0f}s", pytrace=False)
        time.sleep(POLL)


def settled(read: Callable[[], object], expected: object, timeout: float = WAIT) -> object:
    """`read()` once it returns `expected`, else its last reading after `timeout` seconds (for the assertion)."""
    deadline = time.monotonic() + timeout
    reading = read()
    while reading != expected and time.monotonic() < deadline:
        time.sleep(POLL)
        reading = read()
    return reading


class Daemons:
    """Processes started in their own process groups, logging to files, all stopped by `stop`."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[tuple[str, subprocess.Popen]] = []

    def start(
        self, name: str, command: list[str], env: dict[str, str] | None = None, user: str | None = None
    ) -> subprocess.Popen:
        with open(self.logs / f"{name}.log", "ab") as log:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                preexec_fn=_die_with_parent, user=user, group="nogroup" if user else None,
            )  # fmt: skip
        self.started.append((name, process))
        return process

    def tail(self, name: str, lines: int = 15) -> str:
        return "\n".join((self.logs / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        for _, process in reversed(self.started):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for _, process in reversed(self.started):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


class Slurm:
    """A one-node Slurm cluster with munge, the hpcobs prolog and epilog installed from slurm/."""

    def __init__(self, root: Path, daemons: Daemons) -> None:
        self.root, self.daemons = root, daemons
        self.node = socket.gethostname().split(".")[0]
        self.etc, self.scripts, self.release_dir = root / "etc", root / "hpcobs", root / "release"
        self.textfile, self.mapping_dir, self.state = root / "textfile", root / "dcgm-job-map", root / "hpcobs-state"
        self.job_metrics = root / "hpcobs-jobs"
        self.ready_seconds = 0.0
        self.env = {**os.environ, "SLURM_CONF": str(self.etc / "slurm.conf")}

    def start(self) -> None:
        began = time.monotonic()
        for directory in ("etc", "state", "spool", "dev", "munge", "release"):
            (self.root / directory).mkdir()
        self._devices()
        self._install_scripts()
        self._write_config()
        self._start_munge()
        slurmctld = self.daemons.start("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.etc / "slurm.conf")])
        slurmd = self.daemons.start("slurmd", ["slurmd", "-D", "-N", self.node, "-f", str(self.etc / "slurm.conf")])

        def idle() -> bool:
            # slurmd needs what a container may lack (devices, cgroups, root): the one reason to skip. slurmctld
            # only needs its configuration, which is ours: its failure is a failure.
            if slurmd.poll() is not None:
                pytest.skip(f"slurmd cannot start here (exit {slurmd.returncode}):\n{self.daemons.tail('slurmd')}")
            if slurmctld.poll() is not None:
                pytest.fail(
                    f"slurmctld exited ({slurmctld.returncode}):\n{self.daemons.tail('slurmctld')}", pytrace=False
                )
            return self.run("sinfo", "--noheader", "--nodes", self.node, "--format", "%t", check=False) == "idle"

        wait_until(idle, f"node {self.node} idle (slurmd log:\n{self.daemons.tail('slurmd')})")
        self.ready_seconds = time.monotonic() - began

    def _devices(self) -> None:
        """slurmd refuses GRES files that are not devices: character devices, here the numbers of /dev/null."""
        for gpu in range(GPUS):
            try:
                os.mknod(self.root / "dev" / f"nvidia{gpu}", 0o666 | 0o020000, os.makedev(1, 3))
            except PermissionError as error:
                pytest.skip(f"slurmd cannot start here: its GPU device files need mknod ({error.strerror})")

    def _install_scripts(self) -> None:
        """As docs/slurm.md installs them, the directories left for the scripts to make (and check)."""
        settings = {
            "textfile_dir": self.textfile,
            "dcgm_mapping_dir": self.mapping_dir,
            "amd_mapping_dir": "",
            "job_metrics_dir": self.job_metrics,
            "state_dir": self.state,
            "query_scontrol": "yes",
        }
        install_scripts(self.scripts, settings)

    def _write_config(self) -> None:
        root, ctld_port, slurmd_port = self.root, free_port(), free_port()
        (self.etc / "slurm.conf").write_text(
            f"""ClusterName=hpcobs-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu,shard
Prolog={self.scripts}/prolog
Epilog={self.scripts}/epilog
PrologFlags=Alloc
ReturnToService=2
KillWait=1
# Three jobs at once on a machine that may have fewer cores: the configured CPUs count, not the machine's.
SlurmdParameters=config_overrides
NodeName={self.node} NodeAddr=127.0.0.1 CPUs=8 Gres=gpu:{GPUS},shard:{SHARDS} State=UNKNOWN
PartitionName={PARTITION} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
"""
        )
        (self.etc / "gres.conf").write_text(
            f"AutoDetect=off\n"
            f"NodeName={self.node} Name=gpu File={root}/dev/nvidia[0-{GPUS - 1}]\n"
            f"NodeName={self.node} Name=shard Count={SHARDS}\n"
        )

    def _start_munge(self) -> None:
        munge = self.root / "munge"
        subprocess.run(["mungekey", "--create", "--keyfile", str(munge / "key")], check=True, capture_output=True)
        self.daemons.start(
            "munged",
            ["munged", "--foreground", f"--socket={munge}/socket", f"--key-file={munge}/key",
             f"--log-file={munge}/munged.log", f"--pid-file={munge}/munged.pid", f"--seed-file={munge}/seed"],
        )  # fmt: skip
        wait_until(lambda: (munge / "socket").exists(), f"munged socket (log:\n{self.daemons.tail('munged')})")

    def run(self, *command: str, check: bool = True) -> str:
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)
        if check and done.returncode:
            pytest.fail(f"{' '.join(command)} failed (exit {done.returncode}): {done.stderr.strip()}", pytrace=False)
        return done.stdout.strip()

    def submit(self, tag: str, *options: str, exit_code: int = 0, first: str = "") -> str:
        """A batch job that runs the shell commands `first`, then waits until `release(tag)` and exits with
        `exit_code`; its job id."""
        marker = self.release_dir / tag
        script = f"{first}while [ ! -e '{marker}' ]; do sleep 0.1; done; exit {exit_code}"
        return self.run("sbatch", "--parsable", "--output=/dev/null", "--chdir=/tmp", *options, "--wrap", script)

    def release(self, tag: str) -> None:
        (self.release_dir / tag).touch()

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job -d -o` as fields (the job name, which may hold spaces, left out)."""
        line = self.run("scontrol", "show", "job", "--details", "--oneline", job_id)
        return dict(re.findall(r"(?:^| )(\w[\w/:]*)=(\S*)", line.split(" UserId=", 1)[1]))

    def state_of(self, job_id: str) -> str:
        return self.job(job_id)["JobState"]

    def wait_running(self, *job_ids: str) -> None:
        wait_until(lambda: all(self.state_of(job) == "RUNNING" for job in job_ids), f"jobs {job_ids} running")

    def wait_ended(self, job_id: str, state: str) -> None:
        """Until the job reached `state` and its epilog finished (the node no longer lists it)."""
        wait_until(
            lambda: (
                self.state_of(job_id) == state and job_id not in self.run("squeue", "--noheader", "--format=%A").split()
            ),
            f"job {job_id} {state} and its epilog done",
        )

    def gpus_of(self, job_id: str) -> list[str]:
        """Slurm's own record of the job's GPU indices on the node: `GRES=gpu:2(IDX:0-1)`, `GRES=shard:1(IDX:3)`."""
        details = self.job(job_id)
        indices = re.search(r"IDX:([0-9,-]+)", details["GRES"])
        assert indices, details
        return [str(gpu) for gpu in _expand(indices[1])]

    def mapping(self) -> dict[str, list[str]]:
        """What dcgm-exporter reads: each mapping file and its job ids."""
        return {path.name: path.read_text().split() for path in sorted(self.mapping_dir.iterdir()) if path.is_file()}

    def job_info(self, job_id: str) -> str | None:
        path = self.textfile / f"hpcobs_job_{job_id}.prom"
        return path.read_text() if path.exists() else None

    def stop_jobs(self) -> None:
        """Cancel what a failed test left running, and wait for the epilogs, before the daemons stop."""
        if self.run("squeue", "--noheader", "--format=%A", check=False):
            self.run("scancel", "--full", "--user=root", check=False)
            self.run("scancel", "--full", f"--user={NOBODY}", check=False)
        deadline = time.monotonic() + WAIT
        while self.run("squeue", "--noheader", "--format=%A", check=False) and time.monotonic() < deadline:
            time.sleep(POLL)


def install_scripts(directory: Path, settings: dict[str, object]) -> None:
    """As docs/slurm.md installs them: the prolog, epilog and jobs' metrics reader in a new directory of root's, the
    configuration (`settings`) beside them."""
    directory.mkdir(mode=0o755)
    scripts = ("prolog", "epilog", "job-metrics")
    modules = ("hpcobs_slurm.py", "hpcobs_job_metrics.py")
    for name, mode in [(name, 0o755) for name in scripts] + [(name, 0o644) for name in modules]:
        shutil.copy(ROOT / "slurm" / name, directory / name)
        (directory / name).chmod(mode)
    config = directory / "hpcobs-slurm.conf"
    config.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
    config.chmod(0o644)


def _expand(ranges: str) -> list[int]:
    gpus: list[int] = []
    for part in ranges.split(","):
        first, _, last = part.partition("-")
        gpus += range(int(first), int(last or first) + 1)
    return gpus


@pytest.fixture(scope="module")
def slurm() -> Iterator[Slurm]:
    missing = [command for command in (*SLURM_COMMANDS, NODE_EXPORTER) if not shutil.which(command)]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found; install them: {PACKAGES}", pytrace=False)
    if os.geteuid() != 0:
        pytest.skip("slurmd cannot start here: it runs jobs as their users and the prolog as root, so it needs root")
    # Not under pytest's temporary directory: munged, and jobs run as nobody, need every parent to be searchable.
    with tempfile.TemporaryDirectory(prefix="hpcobs-slurm-") as directory:
        root = Path(directory)
        root.chmod(0o755)
        (root / "log").mkdir()
        daemons = Daemons(root / "log")
        cluster = Slurm(root, daemons)
        try:
            cluster.start()
            yield cluster
        finally:
            try:
                cluster.stop_jobs()
            finally:
                daemons.stop()


def test_two_jobs_at_once_one_cancelled_one_failing(slurm, record_property):
    record_property(MEASUREMENT, f"slurm: munged, slurmctld and slurmd ready in {slurm.ready_seconds:.1f}s")
    began = time.monotonic()
    failing = slurm.submit("failing", "--gres=gpu:2", "--account=ml_lab", f"--job-name={JOB_NAME}", exit_code=1)
    cancelled = slurm.submit("cancelled", "--gres=gpu:2", "--account=vision", f"--uid={NOBODY}", "--gid=nogroup")
    slurm.wait_running(failing, cancelled)
    gpus = {job: slurm.gpus_of(job) for job in (failing, cancelled)}
    assert sorted(gpus[failing] + gpus[cancelled]) == ["0", "1", "2", "3"]
    # The prologs may still be running: wait for their files, then compare.
    wait_until(lambda: slurm.job_info(failing) and slurm.job_info(cancelled), "both job-info files")
    mapping = {gpu: [job] for job, job_gpus in gpus.items() for gpu in job_gpus}
    assert settled(slurm.mapping, mapping) == mapping
    escaped_name = JOB_NAME.replace("\\", "\\\\").replace('"', '\\"')
    assert (
        f'hpcobs_slurm_job_info{{hpc_job="{failing}",user="root",account="ml_lab",partition="{PARTITION}",'
        f'job_name="{escaped_name}",qos=""}} 1'
    ) in slurm.job_info(failing)
    assert f'hpc_job="{cancelled}",user="{NOBODY}",account="vision",partition="{PARTITION}",job_name="wrap"' in (
        slurm.job_info(cancelled)
    )

    slurm.run("scancel", cancelled)
    slurm.wait_ended(cancelled, "CANCELLED")
    assert slurm.mapping() == {**{gpu: [failing] for gpu in gpus[failing]}, **{gpu: [] for gpu in gpus[cancelled]}}
    assert slurm.job_info(cancelled) is None and slurm.job_info(failing)

    slurm.release("failing")
    slurm.wait_ended(failing, "FAILED")
    assert slurm.job(failing)["ExitCode"] == "1:0"
    assert slurm.mapping() == {gpu: [] for gpu in "0123"}
    assert slurm.job_info(failing) is None
    assert list((slurm.state / "jobs").iterdir()) == []
    record_property(MEASUREMENT, f"slurm: two jobs, cancelled and failing, checked in {time.monotonic() - began:.1f}s")


def test_a_gpu_shared_by_two_jobs_holds_both_and_keeps_the_other_after_one_ends(slurm):
    # Shards go on GPUs no job holds whole: with three GPUs taken, both sharded jobs land on the fourth.
    whole = slurm.submit("whole", f"--gres=gpu:{GPUS - 1}")
    slurm.wait_running(whole)
    first = slurm.submit("first shard", "--gres=shard:1")
    second = slurm.submit("second shard", "--gres=shard:1")
    slurm.wait_running(first, second)
    (shared,) = set("0123") - set(slurm.gpus_of(whole))
    assert slurm.gpus_of(first) == slurm.gpus_of(second) == [shared]
    # Both prologs start together: either may write its line first.
    wait_until(lambda: sorted(slurm.mapping().get(shared, [])) == sorted([first, second]), f"both jobs on GPU {shared}")
    slurm.release("first shard")
    slurm.wait_ended(first, "COMPLETED")
    assert slurm.mapping()[shared] == [second]
    slurm.release("second shard")
    slurm.release("whole")
    slurm.wait_ended(second, "COMPLETED")
    slurm.wait_ended(whole, "COMPLETED")
    assert slurm.mapping() == {gpu: [] for gpu in "0123"}


def test_the_sweep_keeps_running_jobs_and_empties_what_ended_jobs_left(slurm):
    running = slurm.submit("running", "--gres=gpu:1")
    slurm.wait_running(running)
    (gpu,) = slurm.gpus_of(running)
    wait_until(lambda: slurm.job_info(running) and slurm.mapping().get(gpu) == [running], "the prolog's files")
    # What a node that crashed mid-job leaves: no epilog ran for job 999999.
    (slurm.textfile / "hpcobs_job_999999.prom").write_text("")
    (slurm.mapping_dir / gpu).write_text(f"{running}\n999999\n")
    done = subprocess.run(
        [str(slurm.scripts / "epilog"), "--sweep", "--node", slurm.node],
        env=slurm.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"swept 1 jobs no longer on {slurm.node}: 999999\n"
    assert slurm.mapping()[gpu] == [running] and slurm.job_info(running)
    assert not (slurm.textfile / "hpcobs_job_999999.prom").exists()
    slurm.release("running")
    slurm.wait_ended(running, "COMPLETED")


class DcgmStandIn(ExpositionServer):
    """Serves GPU series the way dcgm-exporter does with `--hpc-job-mapping-dir`: on every scrape it reads the
    directory, and a GPU whose file holds N job ids gets N copies of its series, one per `hpc_job`
    (internal/pkg/transformation/hpc.go); a GPU without ids gets one series without `hpc_job`."""

    NAME = re.compile(r"[0-9]+(\.[0-9]+)?")

    def __init__(self, mapping: Path, node: str, source, version: str) -> None:
        self.mapping, self.node, self.source, self.version = mapping, node, source, version
        super().__init__(lambda path: self.exposition())

    def exposition(self) -> str:
        name = self.source.name("gpu_utilization", self.version)
        jobs = {
            path.name: path.read_text().splitlines()
            for path in self.mapping.iterdir()
            if self.NAME.fullmatch(path.name) and path.is_file()
        }
        lines = [f"# HELP {name} GPU utilization (in %).", f"# TYPE {name} gauge"]
        for gpu in range(GPUS):
            labels = dcgm_gpu_labels(self.source, self.version, self.node, gpu)
            for job in jobs.get(str(gpu)) or [""]:
                with_job = {**labels, "hpc_job": job} if job else labels
                text = ",".join(f'{key}="{value}"' for key, value in with_job.items())
                lines.append(f"{name}{{{text}}} {50 + gpu}")
        return "\n".join(lines) + "\n"


def fast_rule_files(config, folder: Path) -> list[Path]:
    """The generated rule files, every group evaluated each second instead of each scrape interval."""
    paths = []
    for name, text in pipeline.generate(config).items():
        if name.startswith(f"{RULES_DIR}/"):
            document = yaml.safe_load(text)
            for group in document["groups"]:
                group["interval"] = RULE_INTERVAL
            paths.append(folder / Path(name).name)
            paths[-1].write_text(yaml.safe_dump(document, sort_keys=False))
    return paths


@pytest.fixture(scope="module")
def monitoring(slurm, config, tmp_path_factory) -> Iterator[Prometheus]:
    """node_exporter on the textfile directory, slurm/job-metrics (as nobody) on the jobs' own metrics directories,
    the dcgm-exporter stand-in on the mapping directory, and Prometheus scraping them with the generated recording
    rules, as docs/slurm.md sets them up.

    Scrape labels as in a deployment: the cluster label, the job names the config's selectors expect, and an
    `instance` of `<node>:<port>` (node_exporter's job-info series name their host by it, dcgm-exporter's by
    its hostname label)."""
    began = time.monotonic()
    sources = Sources(config)
    dcgm, job_info, training = sources["dcgm"], sources["job_info"], sources["training"]
    version = config.get("exporters", "dcgm", "versions")[0]
    port, jobs_port = free_port(), free_port()
    daemons = Daemons(tmp_path_factory.mktemp("node-exporter"))
    daemons.start(
        "node_exporter",
        [NODE_EXPORTER, "--collector.disable-defaults", "--collector.textfile",
         f"--collector.textfile.directory={slurm.textfile}", f"--web.listen-address=127.0.0.1:{port}"],
    )  # fmt: skip
    reader = [str(slurm.scripts / "job-metrics"), "--listen", f"127.0.0.1:{jobs_port}"]
    daemons.start("job_metrics", reader, user=NOBODY)
    cluster_labels = Context(config).cluster_labels

    def scrape(labels: dict[str, str], address: str, exporter_port: int) -> dict:
        return {
            "job_name": labels["job"],
            "static_configs": [{"targets": [address], "labels": cluster_labels}],
            "relabel_configs": [{"target_label": "instance", "replacement": f"{slurm.node}:{exporter_port}"}],
        }

    try:
        with DcgmStandIn(slurm.mapping_dir, slurm.node, dcgm, version) as stand_in:
            prometheus = Prometheus(
                fast_rule_files(config, tmp_path_factory.mktemp("rules")),
                scrape_configs=[
                    scrape(job_info.scrape_labels(), f"127.0.0.1:{port}", 9100),
                    scrape(training.scrape_labels(), f"127.0.0.1:{jobs_port}", 9500),
                    scrape(dcgm.scrape_labels(), stand_in.address, 9400),
                ],
                scrape_interval=RULE_INTERVAL,
                evaluation_interval=RULE_INTERVAL,
            )
            try:
                prometheus.start()
                wait_until(lambda: _up(prometheus) == 3, "Prometheus scraping node_exporter, job-metrics, the stand-in")
                prometheus.ready_seconds = time.monotonic() - began
                yield prometheus
            finally:
                prometheus.stop()
    finally:
        daemons.stop()


def _up(prometheus: Prometheus) -> int:
    return sum(int(sample.value) for sample in prometheus.query("up", time.time()))


def by(prometheus: Prometheus, expr: str, *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(s.labels.get(label, "") for label in labels): s.value for s in prometheus.query(expr, time.time())}


def test_recording_rules_count_the_gpus_of_each_job_user_and_account(slurm, monitoring, record_property):
    record_property(MEASUREMENT, f"slurm: node_exporter, stand-in and Prometheus up in {monitoring.ready_seconds:.1f}s")
    began = time.monotonic()
    two_gpus = slurm.submit("two GPUs", "--gres=gpu:2", "--account=ml_lab", f"--job-name={JOB_NAME}")
    # The job of nobody attacks: it tries to write job info where root does, and forges job info in its own
    # metrics directory, with the scrape job label of the trusted node_exporter, claiming the other job (refused by
    # job-metrics) and its own job for another owner (served).
    forged = "# HELP hpcobs_slurm_job_info forged\n# TYPE hpcobs_slurm_job_info gauge\n" + "".join(
        f'hpcobs_slurm_job_info{{hpc_job="{job}",user="mallory",account="stolen",partition="{PARTITION}",'
        'job_name="",qos="",job="node"} 1\n'
        for job in (two_gpus, "%s")  # printf puts the job's own id in place of %s
    )
    own = f"{slurm.job_metrics}/$SLURM_JOB_ID"
    attack = (
        f"if printf x > {slurm.textfile}/hpcobs_job_$SLURM_JOB_ID.prom 2>/dev/null; then r=wrote; else r=refused; fi; "
        f"echo $r > {own}/attempt; printf {shlex.quote(forged)} $SLURM_JOB_ID > {own}/forged.prom; "
    )
    one_gpu = slurm.submit(
        "one GPU", "--gres=gpu:1", "--account=vision", f"--uid={NOBODY}", "--gid=nogroup", first=attack
    )
    other_account = slurm.submit("other account", "--gres=gpu:1", "--account=vision")
    jobs = (two_gpus, one_gpu, other_account)
    slurm.wait_running(*jobs)
    expected = {
        "job": {
            (two_gpus, "root", "ml_lab", PARTITION): 2,
            (one_gpu, NOBODY, "vision", PARTITION): 1,
            (other_account, "root", "vision", PARTITION): 1,
        },
        "user": {("root",): 3, (NOBODY,): 1},
        "account": {("ml_lab",): 2, ("vision",): 2},
        "node": {(slurm.node,): 4},
    }
    queries = {
        "job": ("job:gpus_allocated:count", ("hpc_job", "user", "account", "partition")),
        "user": ("sum by (user) (job:gpus_allocated:count)", ("user",)),
        "account": ("account:gpus_allocated:count", ("account",)),
        "node": ("node:gpus_allocated:count", ("node",)),
    }

    def counted() -> dict[str, dict]:
        return {level: by(monitoring, expr, *labels) for level, (expr, labels) in queries.items()}

    # Each record's group evaluates on its own schedule: wait until all agree.
    assert settled(counted, expected) == expected
    # The job name went through Slurm, the prolog's escaping, node_exporter and Prometheus unchanged.
    assert by(monitoring, f'hpcobs_slurm_job_info{{hpc_job="{two_gpus}",job="node"}}', "job_name") == {(JOB_NAME,): 1}
    # The forgery of its own job was scraped, from job-metrics, its `job` label kept aside by Prometheus: the
    # rules, which read job info from job="node" alone, never saw it. The one naming the other job was refused.
    forgery = 'hpcobs_slurm_job_info{user="mallory"}'
    assert wait_until(lambda: by(monitoring, forgery, "job", "exported_job", "hpc_job"), "the forged series") == {
        ("training", "node", one_gpu): 1
    }
    refused = "hpcobs_job_metrics_refused_lines"
    assert by(monitoring, refused, "hpc_job", "reason") == {(one_gpu, "other_job"): 1}
    assert (slurm.job_metrics / one_gpu / "attempt").read_text() == "refused\n"
    assert settled(counted, expected) == expected
    for tag in ("two GPUs", "one GPU", "other account"):
        slurm.release(tag)
    for job in jobs:
        slurm.wait_ended(job, "COMPLETED")
    wait_until(lambda: not by(monitoring, "job:gpus_allocated:count"), "no job holding GPUs once all ended")
    record_property(MEASUREMENT, f"slurm: recording rules checked by query in {time.monotonic() - began:.1f}s")
