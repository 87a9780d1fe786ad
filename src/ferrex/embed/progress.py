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
        self._closing = False
        self._final_shown = False
        if not self._tty:
            kwargs.setdefault("ncols", 80)
            kwargs["ascii"] = True
        super().__init__(*args, **kwargs)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool | None:
        if self._tty:
            return super().display(msg, pos)  # type: ignore[no-any-return]
        # Totals grow while files are discovered: only the close is the end.
        if self._closing:
            if self._final_shown or self.n == 0:
                return True
            self._final_shown = True
        elif self.n == 0 or time.monotonic() - self._last_line < _LINE_EVERY_SECONDS:
            return True
        self._last_line = time.monotonic()
        text = self.__str__().strip() if msg is None else msg
        if text:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        return True

    def close(self) -> None:
        self._closing = True
        super().close()
