#!/usr/bin/env python3
"""hpcobs build entry point: `python build.py --help`."""

import sys

from hpcobs.cli import main

if __name__ == "__main__":
    sys.exit(main())
