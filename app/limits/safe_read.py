"""Reading a file that may come from a stranger (a checkpoint's tables and manifests, a data folder's lines): only a
regular file, never more than a bound (no Streamlit here).

The one reader of such files is ``transformer.checkpoint.regular`` (a checkpoint's own files are read the same way):
a FIFO would block the reading thread until someone writes to it, and a device may never end or may act on being
opened, so a path is checked with ``os.stat`` before it is opened, opened without blocking, and checked again on
the open descriptor (the file may have been swapped in between). Its names are this module's.
"""

from __future__ import annotations

from transformer.checkpoint.regular import FileRefused, megabytes, open_regular, read_regular

__all__ = ["FileRefused", "megabytes", "open_regular", "read_regular"]
