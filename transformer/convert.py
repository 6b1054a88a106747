"""``python -m transformer.convert``, the command as the docs show it. The code lives in
``transformer.exchange.convert``; this module only runs it and hands its names on."""

from .exchange.convert import *  # noqa: F403
from .exchange.convert import main

if __name__ == "__main__":
    raise SystemExit(main())
