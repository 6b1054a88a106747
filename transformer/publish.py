"""``python -m transformer.publish``, the command as the docs show it. The code lives in
``transformer.exchange.publish``; this module only runs it and hands its names on."""

from .exchange.publish import *  # noqa: F403
from .exchange.publish import main

if __name__ == "__main__":
    raise SystemExit(main())
