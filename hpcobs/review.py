"""`build.py diff`: what changed between two builds, for a reviewer (docs/review.md)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `build.py diff`."""


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError
