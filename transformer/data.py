"""``python -m transformer.data``, the command as the docs show it. The code lives in
``transformer.training.data``; this module only runs it and hands its names on."""

from .training.data import *  # noqa: F403
from .training.data import main

if __name__ == "__main__":
    raise SystemExit(main())
