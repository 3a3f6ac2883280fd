"""``capsem-ledger sample``: write a realistic sample ledger, or a whole ``CAPSEM_HOME``.

Parses the arguments (every count range-checked: a usage error before anything is written),
makes sure the target directory exists (created if missing, its parent never:
``capsem_core.outputs``), calls ``write_sample_ledger``
or ``write_sample_home`` and prints what they wrote. An interrupt leaves a partial sample
whose ledgers check sound; the one line on stderr says so.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable

from capsem_core.cli.arguments import counted, output_argument
from capsem_core.outputs import prepare_output_dir
from capsem_core.sample import MIXES, parse_size
from capsem_core.cli.errors import Terminated, UsageError
from capsem_core.errors import LedgerError
from capsem_core.cli.terminal import sanitize

# Upper bounds of the sample's sizes: far above any sample anyone writes, and low enough that
# nothing sized from them overflows.
MAX_SAMPLE_SESSIONS = 100_000
MAX_SAMPLE_BODIES = 10**12
HOME_SESSIONS = 12   # --home's sessions when --sessions is not given


def _size_arg(text: str) -> int:
    """argparse type of --raw-bytes: a size such as 64M."""
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``capsem-ledger sample``."""
    parser.add_argument("directory", metavar="DIR", type=output_argument("sample directory"),
                        help="ledger directory to write, created if missing (its parent must exist; with --home: the CAPSEM_HOME to lay "
                             "out); an existing ledger or main.db there is never overwritten")
    parser.add_argument("--seed", type=counted(0, 2**64 - 1), default=0, help="generation seed (same seed, same bytes); default 0")
    parser.add_argument("--mix", choices=MIXES, default="realistic",
                        help="realistic sessions, many small bodies (100-300 B) or large bodies; default realistic")
    parser.add_argument("--bodies", type=counted(1, MAX_SAMPLE_BODIES), help="stop once this many bodies are written")
    parser.add_argument("--raw-bytes", type=_size_arg, metavar="SIZE",
                        help="stop once this many raw body bytes are written (e.g. 64M, 1G)")
    parser.add_argument("--codec", choices=("deflate", "zstd"), default="deflate",
                        help="archive codec; zstd is this project's extension, which Capsem cannot read")
    parser.add_argument("--home", action="store_true",
                        help="lay out a whole CAPSEM_HOME at DIR (main.db, ephemeral and persistent ledgers)")
    parser.add_argument("--sessions", type=counted(1, MAX_SAMPLE_SESSIONS),
                        help=f"sessions in a --home layout; default {HOME_SESSIONS}")
    parser.add_argument("--progress", action="store_true", help="report progress on stderr (one ledger, not --home)")


def _check_mode(args: argparse.Namespace) -> None:
    """An option that means nothing in the mode asked for is refused rather than ignored."""
    if args.home:
        for option, given in (("--raw-bytes", args.raw_bytes is not None), ("--progress", args.progress)):
            if given:
                raise UsageError(f"{option} applies to one ledger, not to --home")
    elif args.sessions is not None:
        raise UsageError("--sessions is the number of sessions of a --home layout; give --home too")


def run(args: argparse.Namespace) -> int:
    """Write the sample ``args`` ask for; 130 / 143 / 129 after an interrupt, SIGTERM or SIGHUP."""
    _check_mode(args)
    write = _sample_writer(args)
    before = _entries(args.directory)
    prepare_output_dir(args.directory, "sample directory")
    # The writers' warnings are shown after a normal run; after an interrupt the one line below
    # says all there is to say (an interrupted writer takes its archive out of service).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            text = write()
        except (KeyboardInterrupt, Terminated) as e:
            code, what = (130, "interrupted") if isinstance(e, KeyboardInterrupt) else (e.exit_status, "terminated")
            print(f"capsem-ledger sample: {what}; {sanitize(args.directory)} holds a partial sample whose "
                  "ledgers check sound (every body committed before the signal is whole)", file=sys.stderr)
            return code
        except LedgerError as e:
            # What was written before the failure stays, a sample that checks sound; a rerun
            # refuses to write over it, so the line says so.
            if _entries(args.directory) != before:
                raise LedgerError(f"{e.detail}; {sanitize(args.directory)} holds the partial sample written "
                                  "before it (remove it to write the sample again)", e.path) from None
            raise
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    print("\n".join(sanitize(line) for line in text.split("\n")))   # DIR is echoed
    return 0


def _entries(directory: str) -> frozenset[str] | None:
    """The names in ``directory`` (None when it is not one), to tell whether a failed run
    wrote anything."""
    try:
        return frozenset(os.listdir(directory))
    except OSError:
        return None


def _sample_writer(args: argparse.Namespace) -> Callable[[], str]:
    """What writes the sample and returns its description. The writers (numpy) load here,
    when a sample is asked for (not for --help), and before anything is written: a Ctrl-C
    while they load leaves nothing behind to report."""
    if args.home:
        from capsem_core.sample import write_sample_home

        sessions = HOME_SESSIONS if args.sessions is None else args.sessions
        return lambda: write_sample_home(args.directory, seed=args.seed, sessions=sessions, mix=args.mix,
                                         bodies=args.bodies, codec=args.codec).describe()
    from capsem_core.sample import write_sample_ledger
    from capsem_core.sample.units import MIB

    def progress(n: int, raw: int) -> None:
        print(f"  ... {n:,} bodies, {raw / MIB:,.1f} MiB raw", file=sys.stderr, flush=True)

    return lambda: write_sample_ledger(args.directory, seed=args.seed, mix=args.mix, bodies=args.bodies,
                                       raw_bytes=args.raw_bytes, codec=args.codec,
                                       progress=progress if args.progress else None).describe()
