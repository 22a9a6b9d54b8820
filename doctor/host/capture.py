"""What the probes read and what commands printed, kept in memory while they run (thread-safe) for a support bundle
(doctor/integrations/bundle.py): the ``Capture`` a ``Host`` records into."""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional

MAX_FILE_BYTES = 1 << 20          # per file kept
MAX_TOTAL_BYTES = 64 << 20        # all raw copies together
MAX_COMMAND_OUTPUT = 1 << 20      # per stream


def _probe_name() -> Optional[str]:
    # engine threads are "probe-NAME"; a probe's own pools use the prefix "probe-NAME:"
    name = threading.current_thread().name
    return name[len("probe-"):].split(":", 1)[0] if name.startswith("probe-") else None


class Capture:
    """Raw probe outputs, kept in memory while the probes run (thread-safe)."""

    def __init__(self, max_file_bytes: int = MAX_FILE_BYTES, max_total_bytes: int = MAX_TOTAL_BYTES):
        self.max_file_bytes = max_file_bytes
        self.max_total_bytes = max_total_bytes
        self.files: Dict[str, Dict[str, Any]] = {}
        self.commands: List[Dict[str, Any]] = []
        self.total = 0
        self._lock = threading.Lock()

    def file(self, path: str, data: bytes, truncated: bool = False) -> None:
        with self._lock:
            seen = self.files.get(path)
            if seen is not None and len(seen["data"]) >= len(data):
                return
            keep = data[: self.max_file_bytes]
            room = self.max_total_bytes - self.total + (len(seen["data"]) if seen else 0)
            entry = {"size_read": len(data), "truncated": truncated or len(keep) < len(data),
                     "probe": (seen or {}).get("probe") or _probe_name(), "data": b""}
            if len(keep) > room:
                entry["skipped"] = "bundle size limit reached"
            else:
                entry["data"] = keep
                self.total += len(keep) - (len(seen["data"]) if seen else 0)
            self.files[path] = entry

    def command(self, result: Any, error: Optional[str] = None) -> None:
        with self._lock:
            self.commands.append({
                "argv": list(result.argv), "returncode": result.returncode,
                "duration_s": round(result.duration_s, 3), "timed_out": bool(result.timed_out), "error": error,
                "probe": _probe_name(), "stdout": result.stdout[:MAX_COMMAND_OUTPUT],
                "stderr": result.stderr[:MAX_COMMAND_OUTPUT],
                "output_truncated": len(result.stdout) > MAX_COMMAND_OUTPUT or len(result.stderr) > MAX_COMMAND_OUTPUT,
            })
