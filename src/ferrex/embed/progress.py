"""Download progress on stderr, also when stderr is not a terminal.

The model hub's own progress bars switch themselves off when stderr is not a TTY, which is
exactly how an MCP client starts ferrex (its stderr goes to a log file). This bar always shows:
a normal redrawn bar on a terminal, and on anything else one plain line every few seconds
(and a last one when done), which reads well in a client's log.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from tqdm.auto import tqdm

_LINE_EVERY_SECONDS = 3.0


class StderrProgress(tqdm):  # type: ignore[misc]
    """A tqdm bar on stderr that never disables itself."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("name", None)
        kwargs["disable"] = False
        kwargs["file"] = sys.stderr
        self._tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
        self._last_line = 0.0
        self._finished_shown = False
        if not self._tty:
            kwargs.setdefault("ncols", 80)
            kwargs["ascii"] = True
        super().__init__(*args, **kwargs)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool | None:
        if self._tty:
            return super().display(msg, pos)  # type: ignore[no-any-return]
        now = time.monotonic()
        finished = self.total is not None and self.total > 0 and self.n >= self.total
        if self.n == 0 or self._finished_shown:
            return True
        if now - self._last_line < _LINE_EVERY_SECONDS and not finished:
            return True
        self._last_line = now
        self._finished_shown = finished
        text = self.__str__().strip() if msg is None else msg
        if text:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        return True
