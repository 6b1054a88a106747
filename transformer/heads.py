"""``python -m transformer.heads``, the command as the docs show it. The code lives in
``transformer.interpret.heads``; this module only runs it and hands its names on."""

from .interpret.heads import *  # noqa: F403
from .interpret.heads import main

if __name__ == "__main__":
    raise SystemExit(main())
