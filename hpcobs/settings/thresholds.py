"""The thresholds of the config (`thresholds:` in config/default.yaml and site files), typed.

Generated from config/schema.json by `python -m hpcobs.settings.schema_codegen`; do not edit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Duration = str  # a Prometheus duration, validated at load (5m, 1h30m)
Regex = str  # an RE2 regular expression, validated at load


@dataclass(frozen=True)
class Thresholds:
    log_event_window: Duration
    log_nccl_warn_lines: int  # a whole number of log lines, at least 1
    log_nccl_warn_window: Duration
    log_nccl_warn_for: Duration
    exporter_node_collectors: tuple[str, ...]  # a list of node_exporter collector names such as [infiniband, textfile]
    slurm_queue_backlog_for: Duration
    slurm_partition_pending_jobs: int  # a non-negative whole number
    slurm_nodes_drained_for: Duration
    slurm_partition_nodes_drained: int  # a non-negative whole number
    slurm_partition_nodes_down: int  # a non-negative whole number
    exporter_job_info_for: Duration
    exporter_job_mapping_for: Duration
    exporter_down_for: Duration
    gpu_busy_ratio: float  # a ratio between 0 and 1 such as 0.1
    gpu_count_lookback: Duration
    gpu_link_errors_for: Duration
    gpu_nvlink_replay_errors_per_minute: float  # a non-negative number
    gpu_nvlink_crc_errors_per_second: float  # a non-negative number
    gpu_pcie_replays_per_minute: float  # a non-negative number
    gpu_throttle_for: Duration
    gpu_thermal_violation_ratio: float  # a ratio between 0 and 1 such as 0.1
    gpu_temperature_celsius: float  # a temperature in degrees Celsius such as 85
    gpu_fell_off_bus_for: Duration
    gpu_idle_window: Duration
    ib_port_rate_bytes_per_second: int
    ib_port_not_active_for: Duration
    ib_link_flap_window: Duration
    ib_link_flaps: int  # a whole number of link downs, at least 1
    ib_symbol_errors_per_second: float  # a positive number per second
    ib_receive_errors_per_second: float  # a positive number per second
    ib_transmit_discards_per_second: float  # a positive number per second
    ib_errors_for: Duration
    ib_transmit_wait_ticks_per_second: float  # a positive number per second
    ib_congestion_for: Duration
    ib_rate_below_nominal_for: Duration
    storage_shared_mountpoints: Regex
    storage_fill_window: Duration
    storage_fill_horizon: Duration
    storage_fill_min_ratio: float  # a ratio above 0 and at most 1, such as 0.8
    storage_fill_for: Duration
    storage_full_ratio: float  # a ratio above 0 and at most 1, such as 0.8
    storage_full_for: Duration
    storage_checkpoint_stalled_bytes_per_second: float  # a positive number per second
    storage_checkpoint_stall_for: Duration
    storage_nfs_retransmissions_per_second: float  # a positive number per second
    storage_nfs_retransmissions_for: Duration
    storage_lustre_unhealthy_for: Duration
    training_straggler_ratio: float  # a ratio above 0 and at most 1, such as 0.8
    training_straggler_for: Duration
    training_step_time_regression_factor: float  # a number greater than 1
    training_step_time_baseline_window: Duration
    training_step_time_regression_for: Duration
    training_hang_for: Duration
    training_nccl_slowdown_factor: float  # a number greater than 1
    training_baseline_window: Duration
    training_nccl_slow_for: Duration
    training_throughput_drop_ratio: float  # a ratio above 0 and at most 1, such as 0.8
    training_throughput_drop_for: Duration
    security_event_window: Duration
    security_falco_critical_priority: int  # a Falco priority number, 0 (Emergency) to 7 (Debug)
    security_outbound_rules: tuple[str, ...]  # a non-empty list of names
    security_checkpoint_rules: tuple[str, ...]  # a non-empty list of names
    security_checkpoint_policies: tuple[str, ...]  # a non-empty list of names
    security_tetragon_enforcement_actions: tuple[str, ...]  # a non-empty list of names
    security_falco_drops_for: Duration

    @classmethod
    def from_config(cls, values: dict[str, Any]) -> Thresholds:
        """From the validated `thresholds` mapping (lists as tuples: a threshold is never mutated)."""
        arguments: dict[str, Any] = {
            name: tuple(value) if isinstance(value, list) else value for name, value in values.items()
        }
        return cls(**arguments)
