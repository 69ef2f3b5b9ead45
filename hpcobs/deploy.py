"""`build.py deploy`: this build's folders, datasources and dashboards into a running Grafana (docs/deploy.md).

grafana-client is imported only when the command runs, so a build never loads it."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `build.py deploy`."""


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError
