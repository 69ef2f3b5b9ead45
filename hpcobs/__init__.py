"""hpcobs: observability-as-code for AI training clusters under Slurm."""
