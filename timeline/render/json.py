"""Any result as one line of JSON (``--json``): its plain data, encoded by msgspec."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["render_json"]


def render_json(data: Any) -> str:
    """Return a result (a :class:`~timeline.results.base.Result`, or plain data) as one line of JSON."""
    return msgspec.json.encode(data).decode()
