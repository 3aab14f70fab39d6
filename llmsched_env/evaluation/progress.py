"""Status lines and progress bars (tqdm, with an ETA) on stderr, results on stdout; ``enabled=False``
(``--no-progress``) turns both off.
"""

from __future__ import annotations

import sys
from types import TracebackType

from tqdm import tqdm

__all__ = ["Progress", "status"]


def status(message: str, *, enabled: bool = True) -> None:
    """One status line on stderr (flushed at once), unless disabled."""
    if enabled:
        print(message, file=sys.stderr, flush=True)


class Progress:
    """A progress bar over ``total`` steps on stderr, with an ETA; ``print`` writes result lines past it."""

    def __init__(self, total: int, desc: str, *, enabled: bool = True, unit: str = "run") -> None:
        self.enabled = enabled
        self.done, self.total = 0, total  # steps counted and expected (kept when the bar is disabled too)
        self._bar = tqdm(
            total=total, desc=desc, unit=unit, file=sys.stderr, disable=not enabled, dynamic_ncols=True, leave=False
        )

    def update(self, n: int = 1) -> None:
        self.done += n
        self._bar.update(n)

    def set_total(self, total: int) -> None:
        """Grow or shrink the bar (a search whose number of steps is known only as it goes)."""
        self.total = total
        self._bar.total = total
        self._bar.refresh()

    def print(self, line: str) -> None:
        """``line`` on stdout, flushed, without breaking the bar."""
        if self.enabled:
            tqdm.write(line, file=sys.stdout)
            sys.stdout.flush()
        else:
            print(line, flush=True)

    def note(self, line: str) -> None:
        """``line`` on stderr (a warning), flushed, without breaking the bar."""
        if self.enabled:
            tqdm.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
