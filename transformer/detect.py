"""``python -m transformer.detect``, the command as the docs show it. The code lives in
``transformer.interpret.detect``; this module only runs it and hands its names on."""

from .interpret.detect import *  # noqa: F403
from .interpret.detect import main

if __name__ == "__main__":
    raise SystemExit(main())
