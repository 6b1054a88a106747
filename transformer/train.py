"""``python -m transformer.train``, the command as the docs show it. The code lives in
``transformer.training.train``; this module only runs it and hands its names on."""

from .training.train import *  # noqa: F403
from .training.train import main

if __name__ == "__main__":
    raise SystemExit(main())
