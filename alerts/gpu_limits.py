"""A GPU reading against the GPU's own limit, shared by GpuTemperatureHigh (alerts/gpu.py) and
GpuMemoryTemperatureHigh (alerts/gpu_hardware.py); in a module of its own because gpu_hardware.py builds on gpu.py."""

from hpcobs.authoring.context import Context


def over_own_limit(
    ctx: Context,
    signals: list[str],
    limit_signal: str,
    margin: float,
    *,
    gpu: tuple[str, ...],
    keep: tuple[str, ...],
    fallback: float | None = None,
) -> str:
    """A reading of each GPU (by `gpu` and `keep`) above the GPU's own limit, a dcgm-exporter field, less `margin`; on
    a GPU whose limit the site does not collect, above the fixed `fallback` (None: no alert there). DCGM's diagnostic
    judges temperatures the same way: against the GPU's limits, the slowdown temperature when the GPU limit is
    unreadable, and no HBM check without the memory limit (nvvs/src/DcgmRecorder.cpp, DetermineMaxTemp and the HBM
    temperature check)."""
    on_gpu = f"on ({ctx.cluster}, {', '.join(gpu)})"
    limit = ctx.select("dcgm", [limit_signal], gpu)
    own = f"{ctx.select('dcgm', signals, (*gpu, *keep))} > {on_gpu} group_left () ({limit} - {margin})"
    if fallback is None:
        return own
    fixed = ctx.select("dcgm", signals, (*gpu, *keep), when=(">", fallback))
    return f"({own}) or ({fixed} unless {on_gpu} {limit})"
