"""``python -m transformer.ctranslate2_export``, the command as the docs show it. The code lives in
``transformer.exchange.ctranslate2_export``; this module only runs it and hands its names on."""

from .exchange.ctranslate2_export import *  # noqa: F403
from .exchange.ctranslate2_export import main

if __name__ == "__main__":
    raise SystemExit(main())
