"""``python -m transformer.average``, the command as the docs show it. The code lives in
``transformer.training.average``; this module only runs it and hands its names on."""

from .training.average import *  # noqa: F403
from .training.average import main

if __name__ == "__main__":
    raise SystemExit(main())
