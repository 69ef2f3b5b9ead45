"""Where the source tree is: config/, schemas/ and the git checkout sit beside the hpcobs package."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
