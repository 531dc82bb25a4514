"""Reading user-supplied text files (config files; tritonblas reads shapes.yaml with it too) with a size
limit and clear errors."""

from __future__ import annotations

from pathlib import Path


def read_bounded_text(path: Path, limit: int, what: str, error: type[Exception]) -> str:
    """The UTF-8 text of `path`; `error` naming the file when it is missing, too big or not text."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise error(f"{path}: {size} bytes is larger than the {limit}-byte limit for a {what}")
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise error(f"{path}: cannot read {what}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text: {e.reason}") from None
