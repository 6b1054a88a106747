"""``python -m transformer.evaluate``, the command as the docs show it. The code lives in
``transformer.training.evaluate``; this module only runs it and hands its names on."""

from .training.evaluate import *  # noqa: F403
from .training.evaluate import main

if __name__ == "__main__":
    raise SystemExit(main())
