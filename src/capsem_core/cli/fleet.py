"""``capsem-ledger check --all``: every ledger of the home (and of ``--path`` trees) at once.

``check`` delegates here when ``--all`` is given. The ledgers are checked by
``capsem_core.fleet.check_all`` with check's own options (``--verify-bodies``, ``-n``,
``--incremental``, ``--max-age``, ``--subset``), a process per
ledger on this machine (``--jobs``, default one per core) or on a Dask cluster
(``--scheduler tcp://host:port``; ``tls://host:port`` with ``--tls-ca-file``, ``--tls-cert``
and ``--tls-key`` or Dask's TLS configuration; or ``local`` for a cluster of ``--jobs``
workers here).
Text: one summary table (session, path, verdict, counts, time), the totals, every directory
found or given that was not checked and why (unreadable, with the OS's reason; a ``--path``
missing or not searched; not a ledger), each damaged, unreadable or warned ledger with its
findings one line each (``--details``: every finding of every ledger, with places and
examples), and a last line that says "sound" only when every ledger found was read; every
ledger string escaped. ``--json``: one object with ``ledgers`` and ``unchecked`` lists.
Progress on a terminal: ledgers done / total and bytes/s. Exit 1 when any ledger is damaged
or unreadable, a directory could not be read or a ``--path`` was not searched (with
``--strict``, warnings too).
"""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, ContextManager

from capsem_core.cli.arguments import counted, path_argument
from capsem_core.cli.errors import UsageError
from capsem_core.cli.terminal import colour_wanted
from capsem_core.errors import LedgerError

if TYPE_CHECKING:
    from capsem_core.check.incremental import VerifyOptions
    from capsem_core.fleet import FleetReport
    from capsem_core.fleet.cluster import ClientTls

# A tls:// scheduler's client settings (capsem_core.fleet.cluster.client_tls reads them).
TLS_OPTIONS = (("--tls-ca-file", "tls_ca_file", "the CA that signed the scheduler's and this client's certificates"),
               ("--tls-cert", "tls_cert", "this client's certificate (PEM; with its key, unless --tls-key)"),
               ("--tls-key", "tls_key", "the private key of --tls-cert (PEM, unencrypted)"))
# More processes or workers than any machine runs a check in: a bound, not a tuning.
MAX_JOBS = 4096


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``check --all`` (added to check's parser by ``cli/check.py``)."""
    parser.add_argument("--all", action="store_true",
                        help="check every ledger of the home's run directory (ephemeral and persistent) and of "
                             "each --path tree, in parallel, and print one summary")
    parser.add_argument("--path", action="append", type=path_argument, default=[], metavar="DIR",
                        help="with --all: also every ledger under DIR (a ledger, a home, or a tree of them; "
                             "symbolic links are not followed); repeatable")
    parser.add_argument("--jobs", type=counted(1, MAX_JOBS), metavar="N",
                        help="with --all: ledgers checked at once, a process each (default: one per core); with "
                             "--scheduler local, the cluster's workers")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="with --all: run on the Dask cluster at ADDRESS (tls://host:port, or "
                             "tcp://host:port: anyone who can reach that scheduler can run code on its workers; "
                             "every worker reads the ledgers by the same path), or 'local' for a local cluster "
                             "(needs pip install 'capsem-core[fleet]')")
    for flag, dest, what in TLS_OPTIONS:
        parser.add_argument(flag, dest=dest, metavar="FILE",
                            help=f"with --scheduler tls://...: {what} (Dask's own flag; default: Dask's "
                                 "distributed.comm.tls configuration)")
    parser.add_argument("--details", action="store_true",
                        help="with --all: list every finding of every ledger (with its place and examples), not "
                             "only the first few of each damaged or warned ledger")


def refuse_fleet_options(args: argparse.Namespace) -> None:
    """--path, --jobs, --scheduler and --details mean something only with --all."""
    for flag, given in (("--path", bool(args.path)), ("--jobs", args.jobs is not None),
                        ("--scheduler", args.scheduler is not None), ("--details", args.details)):
        if given:
            raise UsageError(f"{flag} is an option of check --all")
    for flag in _tls_given(args):
        raise UsageError(f"{flag} is an option of check --all")


def _tls_given(args: argparse.Namespace) -> list[str]:
    return [flag for flag, dest, _ in TLS_OPTIONS if getattr(args, dest, None) is not None]


def run(args: argparse.Namespace, *, options: VerifyOptions | None) -> int:
    """``check --all``: the fleet run and its report; exit status 1 when any ledger is
    damaged or unreadable. ``options``: the verify options ``check`` built from its own
    flags, passed to every ledger's check."""
    if args.session is not None or args.db is not None:
        raise UsageError("check --all checks every ledger; give no SESSION or --db with it")
    # The fleet's machinery and its text load only for a fleet run (check's start-up is its own).
    from capsem_core.cli.fleet_text import render_fleet
    from capsem_core.fleet import UnsupportedOption, fleet_to_json

    extra: dict[str, Any] = {"options": options}
    tls: ClientTls | None = None
    if args.scheduler is not None:
        from capsem_core.fleet.cluster import DaskMissing, check_address, client_tls, require_dask

        try:
            check_address(args.scheduler)
        except ValueError:
            raise UsageError(f"--scheduler takes tcp://host:port or 'local' (tls://host:port for TLS), "
                             f"not {args.scheduler!r}") from None
    tls_flags = _tls_given(args)
    if tls_flags and not (args.scheduler or "").startswith("tls://"):
        raise UsageError(f"{tls_flags[0]} is for a TLS scheduler: --scheduler tls://host:port")
    if args.scheduler is not None:
        try:
            require_dask()
        except DaskMissing as exc:
            print(f"capsem-ledger check: {exc}", file=sys.stderr)
            return 2
        # Before the search: a TLS setting that is missing or unusable is one line (exit 1).
        tls = client_tls(args.scheduler, ca_file=args.tls_ca_file, cert=args.tls_cert, key=args.tls_key)
    # The checks only read, so SIGTERM or SIGHUP may end them at once (app.main raises it as
    # Terminated): the runner kills its processes.
    try:
        report = _run(args, extra, tls)
    except UnsupportedOption as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        sys.stdout.write(fleet_to_json(report, strict=args.strict))
    else:
        sys.stdout.write(render_fleet(report, colour=colour_wanted(sys.stdout), details=args.details))
    return report.exit_code(args.strict)


def _run(args: argparse.Namespace, extra: dict[str, Any], tls: ClientTls | None) -> FleetReport:
    from capsem_core.cli.fleet_text import FleetProgressBar
    from capsem_core.fleet import FleetReport, check_all, discover
    from capsem_core.sessions.home import home_layout

    found = discover(args.path, home=True)
    if not found.ledgers:
        if found.unchecked:  # nothing to check, but what was found or given is reported (exit 1)
            return FleetReport([], list(found.notes), unchecked=list(found.unchecked))
        layout = home_layout()
        where = [str(layout.sessions_root), str(layout.persistent_root)] + [str(p) for p in args.path]
        raise LedgerError(f"no ledgers found in {', '.join(where)}")
    bar = FleetProgressBar(len(found.ledgers), sum(x.size for x in found.ledgers)) if sys.stderr.isatty() else None
    client_context: ContextManager[Any] = nullcontext(None)
    if args.scheduler is not None:
        from capsem_core.fleet.cluster import connect
        from capsem_core.fleet.local import default_jobs

        client_context = connect(args.scheduler, workers=args.jobs or default_jobs(), tls=tls)
    with client_context as client, (bar.shown() if bar is not None else nullcontext()):
        report = check_all(found.ledgers, verify_bodies=args.verify_bodies, rows=args.rows, jobs=args.jobs,
                           client=client, progress=bar, **extra)
    report.notes[:0] = found.notes
    report.unchecked[:0] = found.unchecked
    return report


__all__ = ["add_arguments", "refuse_fleet_options", "run"]
