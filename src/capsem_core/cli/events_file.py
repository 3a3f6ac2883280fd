"""``capsem-ledger events --table T --format parquet|arrow -o FILE``: one table's rows as a file.

The rows come from ``Ledger.scan`` (any table of the schema, one snapshot, ``--after`` a
cursor as for the lines), batch by batch into pyarrow's Parquet or Arrow IPC file writer, so
memory holds a few batches whatever the table's size. The file is written through
``capsem_core.outputs.output_stream`` (the name checked before the ledger is read, a
temporary file renamed when whole, removed on Ctrl-C or SIGTERM); ``-o -`` is standard
output when it is not a terminal. pyarrow is the optional ``[arrow]`` extra: without it the
command says how to install it, exit 1. It ends by printing ``cursor: ...`` on stderr, the
cursor after the rows written. A column holding several storage classes is an Arrow union,
which Parquet cannot hold: such a table is refused for Parquet (write ``--format arrow``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from capsem_core.cli.arguments import ledger_target, output_argument
from capsem_core.cli.errors import UsageError
from capsem_core.errors import LedgerError
from capsem_core.outputs import STDOUT, output_stream

FORMATS = ("parquet", "arrow")
INSTALL = "pip install 'capsem-core[arrow]'"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS,
                        help="write one --table's rows to -o FILE as Parquet or an Arrow IPC file (needs pyarrow: "
                             f"{INSTALL}); the table may be any table of the ledger")
    parser.add_argument("-o", "--output", metavar="FILE", type=output_argument("output file", stdout=True),
                        help="with --format: the file to write (- for stdout)")


def _checked(args: argparse.Namespace) -> str:
    """The table to write, after every argument check that needs no ledger."""
    if args.output is None:
        raise UsageError("--format writes a file: name it with -o FILE")
    for option, given in (("--jsonl", args.jsonl), ("--follow", args.follow), ("--limit", args.limit is not None)):
        if given:
            raise UsageError(f"--format writes every row of one table: not with {option}")
    if not args.table or len(args.table) != 1:
        raise UsageError("--format writes one table: name it with one --table")
    from capsem_core.columns.plan import check_table   # (the column scanner: numpy)

    try:
        table = check_table(args.table[0])
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    # The name itself was checked by the parser, before the ledger is read.
    if args.output == STDOUT and sys.stdout.isatty():
        raise UsageError(f"{args.format} is binary: name a file with -o, or redirect stdout")
    return table


def _pyarrow() -> tuple[Any, Any, Any]:
    try:
        import pyarrow  # type: ignore[import-untyped]
        import pyarrow.ipc  # type: ignore[import-untyped]
        import pyarrow.parquet  # type: ignore[import-untyped]
    except ImportError:
        raise LedgerError(f"--format needs pyarrow, which is not installed: {INSTALL}") from None
    return pyarrow, pyarrow.parquet, pyarrow.ipc


def run(args: argparse.Namespace) -> int:
    table = _checked(args)
    pa, pq, ipc = _pyarrow()
    db_path = ledger_target(args)
    from capsem_core.ledger import Ledger

    # SIGTERM and SIGHUP come here as Terminated (app.main's handler), so the partial file
    # goes, as on Ctrl-C.
    with Ledger(db_path) as ledger:
        scan = ledger.scan(table, after=args.after)
        reader = pa.RecordBatchReader.from_stream(scan)
        unions = [f.name for f in reader.schema if pa.types.is_union(f.type)]
        if args.format == "parquet" and unions:
            raise LedgerError(f"{table}.{unions[0]} holds values of several storage classes (an Arrow union), "
                              "which Parquet cannot hold: write --format arrow", db_path)
        with output_stream(args.output, inputs=(ledger.db_path,)) as out:
            writer = (pq.ParquetWriter(out, reader.schema) if args.format == "parquet"
                      else ipc.new_file(out, reader.schema))
            try:
                for batch in reader:
                    writer.write_batch(batch)
            finally:
                writer.close()
            out.flush()
        print(f"cursor: {scan.cursor}", file=sys.stderr)
    return 0


__all__ = ["FORMATS", "add_arguments", "run"]
