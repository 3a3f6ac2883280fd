"""Peak memory of a column scan, measured in a process of its own (Linux: /proc).

``peak_in_child(directory, table, ...)`` runs this file as a child and returns what it
printed: the growth of the child's peak resident memory (VmHWM) while it read one scan of
``table``, either as a stream whose batches it drops one by one (pyarrow's
``RecordBatchReader``, the way a bounded consumer reads) or, with ``hold``, as one
``pyarrow.table`` that keeps them all; with the Arrow bytes of the batches (their buffers'
sizes) to compare it with.

Before the measured scan the child reads the same scan once and drops it, so the pages of
session.db the scan reads are already mapped into it (they count in its resident memory, and
would otherwise be counted as the scan's) and the allocator has seen batches of that size;
then it resets the peak (``/proc/self/clear_refs``, 5) and reads the scan again. The child
reads with no bound on the scans' window of the map (``CAPSEM_CORE_PAGE_WINDOW=0``), so the
pages stay mapped between the two reads (the window itself is measured by
tests/columns/test_file_window.py). The growth is therefore what the batches in flight cost:
the workers' batches filled ahead, the one the consumer holds, and whatever the scan keeps
besides.

    python oracles/scan_memory.py DIRECTORY TABLE [--threads N] [--batch-rows N]
                                  [--batch-bytes N] [--hold] [--path rows]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _read(directory: Path, table: str, threads: int, batch_rows: int, batch_bytes: int, hold: bool,
          held: Any, path: str | None) -> dict[str, int]:
    import pyarrow as pa

    from capsem_core.columns.scan import open_scan

    scan = open_scan(directory / "session.db", table, threads=threads, held=held, batch_rows=batch_rows,
                     batch_bytes=batch_bytes, path=path)
    rows = batches = total = largest = 0
    pages = int(scan.path == "pages")
    if hold:
        whole = pa.table(scan)
        batches = len(whole.to_batches())
        rows, total = whole.num_rows, whole.nbytes
        largest = max((b.nbytes for b in whole.to_batches()), default=0)
        del whole
    else:
        for batch in pa.RecordBatchReader.from_stream(scan):
            rows += batch.num_rows
            batches += 1
            total += batch.nbytes
            largest = max(largest, batch.nbytes)
            del batch  # the consumer is done with it before it asks for the next
    return {"rows": rows, "batches": batches, "table_bytes": total, "batch_bytes_max": largest, "pages": pages}


def measure(directory: Path, table: str, *, threads: int, batch_rows: int, batch_bytes: int,
            hold: bool, path: str | None = None) -> dict[str, int]:
    """In this process: one scan to warm up, then the measured one (see the module)."""
    from capsem_core.columns.source import HeldFile

    held = HeldFile(directory / "session.db")
    try:
        _read(directory, table, threads, batch_rows, batch_bytes, False, held, path)
        CLEAR_REFS.write_text("5")
        baseline = _status_kib("VmHWM")
        out = _read(directory, table, threads, batch_rows, batch_bytes, hold, held, path)
        out["peak_growth"] = (_status_kib("VmHWM") - baseline) * 1024
        out["baseline"] = baseline * 1024
        return out
    finally:
        held.close()


def peak_in_child(directory: Path, table: str, *, threads: int, batch_rows: int, batch_bytes: int,
                  hold: bool = False, path: str | None = None, timeout: float = 300.0) -> dict[str, int]:
    """``measure`` in a fresh interpreter (so nothing else this process did counts)."""
    argv = [sys.executable, __file__, str(directory), table, "--threads", str(threads), "--batch-rows",
            str(batch_rows), "--batch-bytes", str(batch_bytes)] + (["--hold"] if hold else []) + \
        (["--path", path] if path else [])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "CAPSEM_CORE_PAGE_WINDOW": "0"})
    if done.returncode != 0:
        raise RuntimeError(f"the scan_memory child failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    result: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("table")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--batch-rows", type=int, default=1 << 16)
    parser.add_argument("--batch-bytes", type=int, default=64 << 20)
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--path", choices=("rows",), help="read through SQLite's statements")
    args = parser.parse_args()
    print(json.dumps(measure(args.directory, args.table, threads=args.threads, batch_rows=args.batch_rows,
                             batch_bytes=args.batch_bytes, hold=args.hold, path=args.path)))


if __name__ == "__main__":
    main()
