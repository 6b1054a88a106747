"""``python -m transformer.corpus``, the command as the docs show it. The code lives in
``transformer.interpret.corpus``; this module only runs it and hands its names on."""

from .interpret.corpus import *  # noqa: F403
from .interpret.corpus import main

if __name__ == "__main__":
    raise SystemExit(main())
