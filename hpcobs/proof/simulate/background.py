"""Scenario kinds of the work a healthy fleet sees and no alert should page for (docs/simulator.md, "A week's
workload"): planned maintenance, a power excursion, a node joining or leaving the cluster, a Prometheus restart, a
user's job ended by its own Xid, a node_exporter scrape timeout. They register in scenarios.KINDS like the faults.
"""

from __future__ import annotations

from hpcobs.proof.simulate.core import UP
from hpcobs.proof.simulate.expect import Expectation
from hpcobs.proof.simulate.model import FOREVER, Job, Node
from hpcobs.proof.simulate.scenarios import (
    INF,
    Effect,
    Fault,
    Scene,
    Spec,
    _gpu_fault,
    _port,
    _reset_after,
    _xid,
    _xid_class,
    _xid_expectation,
    kind,
)

# How long a planned reboot keeps the node's exporters away: firmware POST of an 8-GPU server, the OS boot, the
# driver and nvidia-fabricmanager starting. An assumption in the range (5-10 minutes), not a measurement.
REBOOT_SECONDS = 480
MAINTENANCE_REASON = "planned maintenance: kernel update"
DECOMMISSION_REASON = "decommission"


def _drained_at(scene: Scene, node: Node, start: int) -> int:
    """When the node, drained at `start`, is empty: when its running job ends on its own (a decommission waits for
    it). The caller blocks the node from `start`: Slurm starts no job on a draining node."""
    job = scene.job_on(node.index, start)
    return start if job is None else scene.window.offset(scene.idx(job.end))  # the first scrape after it


def _drain(reason: str) -> tuple:
    return (("state", "drain"), ("reason", reason))


def _drain_expectation(scene: Scene, node: Node, at: int, reason: str) -> list[Expectation]:
    """Slurm shows the node drained (draining while its job runs): SckyzO per node, native as a count."""
    if not scene.sources["slurm"].enabled:
        return []
    if scene.sources["slurm"].exporter.id == "slurm_sckyzo":
        return scene.expect(
            f"{node.name} drained: {reason}",
            "slurm",
            "node_drain_reason",
            None,
            "value",
            "==",
            1,
            at,
            raw=True,
            node=node.name,
            reason=reason,
        )
    return scene.expect("a node drained", "slurm", "nodes_drain", None, "value", ">=", 1, at, raw=True)


def _batch_node(scene: Scene, spec: Spec, position: int) -> Node:
    """A batch node (single-node jobs): taking it out ends no multi-node job. Named ones may be any node."""
    return scene.node(spec, scene.batch(position))


@kind(
    "planned_maintenance",
    2400,
    f"A maintenance window on one node: drained in Slurm at the start (reason '{MAINTENANCE_REASON}', no job starts "
    f"on it), rebooted for its last {REBOOT_SECONDS // 60} minutes (a job still running then is cancelled, as a "
    "maintenance reservation ends it): every exporter on it stops answering, node_exporter's boot time moves, the GPUs "
    "come back with reset counters and the node resumes at the end. Default: third batch node.",
    targets=("node",),
)
def _planned_maintenance(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node = _batch_node(scene, spec, 2)
    back = scene.window.offset(scene.idx(end)) if end < INF else FOREVER
    reboot = max(start, back - REBOOT_SECONDS)
    job = scene.job_on(node.index, reboot)
    if job is not None:
        scene.end_job(job, reboot, "CANCELLED")
    scene.block_node(node.index, start, back, kill=None)
    # Slurm keeps the admin's drain through the reboot (DRAIN, with the not-responding flag while slurmd is away).
    effects = (
        Effect("node_state", (node.index,), scene.idx(start), scene.idx(back), _drain(MAINTENANCE_REASON)),
        Effect("host_down", (node.index,), scene.idx(reboot), scene.idx(back)),
        Effect("boot", (node.index,), scene.idx(back), scene.idx(back) + 1),
        *_reset_after(scene, node, back),
    )
    expectations = _drain_expectation(scene, node, start + scene.window.step, MAINTENANCE_REASON)
    expectations += scene.expect(
        f"node_exporter of {node.name} away while it reboots",
        "node_exporter",
        "boot_time",
        node,
        "absent",
        None,
        None,
        back - scene.window.step,
        window=max(scene.window.step, back - reboot - scene.window.step),
    )
    expectations += scene.expect(
        f"{node.name} booted again",
        "node_exporter",
        "boot_time",
        node,
        "value",
        ">",
        scene.window.time(scene.idx(reboot)),
        back + scene.window.step,
        raw=True,
    )
    return Fault(
        "planned_maintenance",
        start,
        back,
        {"node": node.name},
        f"{node.name} drained and rebooted",
        effects,
        tuple(expectations),
    )


@kind(
    "power_excursion",
    90,
    "A brief power excursion on a busy GPU: its draw overshoots the 700 W limit, dcgm-exporter's clock-events count "
    "carries power_cap (the firmware caps the clocks, GpuThermalSlowdown does not read that reason), the power "
    "violation counter grows at one second a second. Default: last hero node, GPU 5.",
    targets=("node", "gpu"),
)
def _power_excursion(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node, gpu, target = _gpu_fault(scene, spec, scene.hero(-1), 5)
    effects = (Effect("power_cap", (node.index, gpu), scene.idx(start), scene.idx(end)),)
    at = min(end, scene.window.duration) - scene.window.step
    expectations = scene.expect("GPU over its limit", "dcgm", "power", node, "value", ">", 700, at, gpu=str(gpu))
    if node.csv == "extended":
        expectations += scene.expect(
            "power capping in the exporter's clock-events window",
            "dcgm",
            "clock_events",
            node,
            "value",
            ">",
            0,
            at,
            raw=True,
            gpu=str(gpu),
            clock_event="power_cap",
        )
    return Fault(
        "power_excursion", start, end, target, f"power excursion on {node.name} GPU {gpu}", effects, tuple(expectations)
    )


def _scrape_target_labels(scene: Scene, exporter: str, node: Node) -> dict[str, str]:
    return {**scene.sources[exporter].scrape_labels(), "instance": f"{node.name}:{_port(exporter)}"}


def _presence(scene: Scene, node: Node, description: str, function: str, at: int, window: int) -> list[Expectation]:
    """node_exporter's `up` of the node absent or present over `window` before `at`."""
    if not scene.fits(at) or at - window < 0:
        return []
    labels = _scrape_target_labels(scene, "node_exporter", node)
    return [Expectation(scene.kind, description, UP, labels, function, None, None, at, window)]


@kind(
    "node_joins",
    0,
    "A node added to the cluster: until the start it is in no file_sd list and not in slurm.conf (no series, no up, no "
    "Slurm state), then its exporters answer and Slurm schedules jobs on it. Default: fourth batch node.",
    targets=("node",),
    timing=("start",),
)
def _node_joins(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node = _batch_node(scene, spec, 3)
    scene.block_node(node.index, -FOREVER, start, kill=None)
    effects = (Effect("node_absent", (node.index,), 0, scene.idx(start)),)
    step = scene.window.step
    expectations = _presence(
        scene, node, f"{node.name} not scraped before it joins", "absent", start - step, start - step
    )
    expectations += _presence(scene, node, f"{node.name} scraped once it joined", "present", start + step, step)
    return Fault("node_joins", start, start, {"node": node.name}, f"{node.name} joins", effects, tuple(expectations))


@kind(
    "node_leaves",
    0,
    f"A node removed from the cluster: drained (reason '{DECOMMISSION_REASON}') until its job ends, then taken out "
    "of slurm.conf and of every file_sd list: its series and its `up` vanish for good, as from a target Prometheus no "
    "longer scrapes. Default: second batch node.",
    targets=("node",),
    timing=("start",),
)
def _node_leaves(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node = _batch_node(scene, spec, 1)
    gone = _drained_at(scene, node, start)
    scene.block_node(node.index, start, FOREVER, kill=None)
    s, g = scene.idx(start), scene.idx(gone)
    effects = (
        Effect("node_state", (node.index,), s, g, _drain(DECOMMISSION_REASON)),
        Effect("node_absent", (node.index,), g, scene.window.steps),
    )
    step = scene.window.step
    # An idle node leaves at once: it shows no drain.
    expectations = _drain_expectation(scene, node, start + step, DECOMMISSION_REASON) if gone > start else []
    expectations += _presence(scene, node, f"{node.name} scraped until it leaves", "present", gone - step, step)
    expectations += _presence(scene, node, f"{node.name} never scraped again", "absent", gone + 600, 600)
    return Fault("node_leaves", start, gone, {"node": node.name}, f"{node.name} leaves", effects, tuple(expectations))


@kind(
    "prometheus_restart",
    90,
    "Prometheus restarts (an upgrade, a config change that needs one): no scrape of any target for the duration, so "
    "every series, `up` included, has a gap. Rule evaluation stops too: the replay's evaluator is told by "
    "replay.restarts (docs/simulator.md).",
)
def _prometheus_restart(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    effects = (Effect("scrape_gap", (), scene.idx(start), scene.idx(end)),)
    step = scene.window.step
    at = min(end, scene.window.duration) - step
    node = scene.cluster.nodes[0]
    expectations = _presence(scene, node, "no sample of any target in the gap", "absent", at, max(step, at - start))
    return Fault("prometheus_restart", start, end, {}, "Prometheus restarting", effects, tuple(expectations))


@kind(
    "node_exporter_down",
    30,
    "node_exporter on one node does not answer in time (a scrape timeout, or a restart): up = 0 and its series are "
    "absent for the duration. Default: the last batch node.",
    targets=("node",),
)
def _node_exporter_down(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    node = _batch_node(scene, spec, -1)
    effects = (Effect("exporter_down", ("node_exporter", node.index), scene.idx(start), scene.idx(end)),)
    at = start
    labels = _scrape_target_labels(scene, "node_exporter", node)
    expectations = (
        [Expectation("node_exporter_down", "node_exporter target down", UP, labels, "value", "==", 0, at)]
        if scene.fits(at)
        else []
    )
    return Fault(
        "node_exporter_down",
        start,
        end,
        {"node": node.name, "exporter": "node_exporter"},
        f"node_exporter down on {node.name}",
        effects,
        tuple(expectations),
    )


def _job_on_gpu(scene: Scene, node: Node, gpu: int, at: int) -> Job:
    """The job on the GPU at `at`, as the scenarios resolved so far left the timeline."""
    job = next((j for j in scene.jobs.values() if (node.index, gpu) in j.gpus and scene.running(j, at)), None)
    if job is None:
        raise scene.refuse(f"no job runs on {node.name} GPU {gpu} at its start", "move start= or name another node=")
    return scene.jobs[job.id]


def _job_xid(scene: Scene, spec: Spec, start: int, end: int) -> Fault:
    """The job's own code hits an application-class Xid and the job dies of it: the CUDA error ends the process, the
    job ends FAILED at the next scrape; the Xid stays in dcgm-exporter's last-value field (sticky, on the GPU's series
    without hpc_job once the epilog removed the mapping)."""
    code = int(spec.kind.removeprefix("job_xid"))
    node, gpu, target = _gpu_fault(scene, spec, scene.batch(0), 0)
    job = _job_on_gpu(scene, node, gpu, start)
    died = start + scene.window.step
    scene.end_job(job, died, "FAILED")
    effects = (_xid(scene, node, gpu, code, start, end), *_reset_after(scene, node, end))
    return Fault(
        spec.kind,
        start,
        end,
        {**target, "job": job.id, "class": _xid_class(scene, code)},
        f"job {job.id} dies of its Xid {code} on {node.name} GPU {gpu}",
        effects,
        tuple(_xid_expectation(scene, node, gpu, code, start)),
    )


for _code, _what in ((13, "graphics engine exception"), (31, "GPU memory page fault"), (43, "GPU stopped processing")):
    kind(
        f"job_xid{_code}",
        INF,
        f"A user's job ends by its own Xid {_code} ({_what}, application class): the Xid is reported, the job ends "
        "FAILED a scrape later, the Xid stays sticky on the GPU until a driver reload. Default: first batch node, "
        "GPU 0 (a job must run there at the start).",
        targets=("node", "gpu"),
    )(_job_xid)
