"""The Dask runner: a fleet run's tasks on a ``dask.distributed`` cluster.

Tasks are ledgers, and block ranges of the ledgers whose archive is larger than the run's
``range_bytes`` (so one huge ledger spreads over many workers; ``merge.py`` joins them into
the report one whole check gives). Every worker reads the ledgers by path, so the files must
be where the path says on every worker (shared storage), and capsem_core must be installed
on the workers. Largest ledgers go first (Dask priorities), so the longest task does not
start last.

A worker that dies while it holds a task is Dask's to recover: the scheduler gives the task
to another worker (up to its ``allowed-failures``; past that the ledger is unreadable, its
check having killed every worker that took it), and a task that raised is retried
``retries`` times (``Client.submit(retries=)``). Each task logs its start on the scheduler,
which logs each worker it loses with the tasks it held: from those events the report says,
per ledger, how many times its tasks started and why they ran again.

A ``tcp://`` scheduler takes work from anyone who can reach it, and its workers run that
work with their own privileges; a ``tls://`` one takes it only from a client whose
certificate its CA signed. ``client_tls`` resolves this client's TLS settings (arguments
first, then Dask's ``distributed.comm.tls.*`` configuration) and loads them before anything
connects, and ``connect`` turns a refused or failed connection into one ``SchedulerError``
line naming the address or the setting.

Dask is an optional extra (``pip install 'capsem-core[fleet]'``); this module imports it only
when a run asks for a cluster.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import signal
import ssl
import stat
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from capsem_core import cores
from capsem_core.fleet.discover import FleetLedger
from capsem_core.fleet.merge import merge_split
from capsem_core.fleet.results import LedgerResult
from capsem_core.fleet.task import (
    RangeOutcome, RangeTask, TaskOutcome, block_ranges, check_task, failure_text, range_task, task_for,
)

if TYPE_CHECKING:
    from distributed import Client, Future
    from distributed.security import Security

INSTALL_HINT = "--scheduler needs Dask, which is not installed: pip install 'capsem-core[fleet]'"
START_TOPIC = "capsem-fleet-start"
# Tasks whose ledger is gone or unreadable answer with an error, not an exception, so a
# retry is only for a task that raised (a worker's own trouble): two more tries.
DEFAULT_RETRIES = 2
SCHEMES = ("tcp", "tls")
# This client's TLS settings: the flag of check --all, the Security field it sets, and the
# Dask configuration key it overrides (Dask's own names: dask scheduler / worker take the
# same flags). The key may be left out when the certificate's file holds it.
TLS_SETTINGS = (("--tls-ca-file", "tls_ca_file", "distributed.comm.tls.ca-file"),
                ("--tls-cert", "tls_client_cert", "distributed.comm.tls.client.cert"),
                ("--tls-key", "tls_client_key", "distributed.comm.tls.client.key"))
CONNECT_TIMEOUT = "30s"


class DaskMissing(ImportError):
    """``--scheduler`` was given, and Dask is not installed (``INSTALL_HINT``)."""


def require_dask() -> None:
    """Raise DaskMissing (with the one-line install hint) unless dask.distributed imports."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise DaskMissing(INSTALL_HINT) from None


class SchedulerError(OSError):
    """The scheduler cannot be used from here: not reached, this client's TLS settings
    missing or unusable, or the TLS handshake refused. Its message is one line naming the
    address or the setting (an OSError: the command line prints it and exits 1)."""


def check_address(address: str) -> None:
    """Raise ValueError unless ``address`` is ``local``, ``tcp://host:port`` or ``tls://host:port``."""
    if address == "local":
        return
    try:
        parts = urlsplit(address)
        good = (parts.scheme in SCHEMES and bool(parts.hostname) and bool(parts.port) and not parts.username
                and not (parts.path or parts.query or parts.fragment))
    except ValueError:  # a port that is no number, or out of range; a bad [IPv6] host
        good = False
    if not good:
        raise ValueError(f"a scheduler is tcp://host:port, tls://host:port or 'local', not {address!r}")


@dataclass(frozen=True, slots=True)
class ClientTls:
    """This client's TLS settings for a ``tls://`` scheduler: Dask's ``Security`` and, per
    field, where it came from ("--tls-cert PATH" or "distributed.comm.tls.client.cert PATH")."""

    security: Security
    named: dict[str, str]

    def name(self, field_name: str) -> str:
        return self.named.get(field_name, field_name)


def client_tls(address: str, *, ca_file: str | None = None, cert: str | None = None,
               key: str | None = None) -> ClientTls | None:
    """This client's TLS settings for the scheduler at ``address``: None for ``tcp://`` or
    ``local`` (ValueError if any is given); for ``tls://`` each from its argument or else
    from Dask's configuration (``TLS_SETTINGS``; e.g. ``DASK_DISTRIBUTED__COMM__TLS__CA_FILE``),
    every file read and the certificate and key loaded here, so that a missing, unreadable or
    mismatched setting is a SchedulerError naming it before anything connects."""
    given = {"tls_ca_file": ca_file, "tls_client_cert": cert, "tls_client_key": key}
    if not address.startswith("tls://"):
        if any(v is not None for v in given.values()):
            raise ValueError(f"TLS settings are for a tls:// scheduler, not {address!r}")
        return None
    require_dask()
    from distributed.security import Security

    try:
        security = Security(require_encryption=True,  # type: ignore[no-untyped-call]
                            **{k: v for k, v in given.items() if v is not None})
    except ValueError as exc:  # e.g. a TLS version in Dask's configuration it does not know
        raise SchedulerError(f"Dask's TLS configuration: {exc}") from None
    named = {}
    for flag, name, config in TLS_SETTINGS:
        value = getattr(security, name)
        if value is not None:
            shown = "(PEM text)" if "\n" in value else value
            named[name] = f"{flag if given[name] is not None else config} {shown}"
    missing = [f"{flag} (or Dask's {config})" for flag, name, config in TLS_SETTINGS[:2] if name not in named]
    if missing:
        raise SchedulerError(f"{address} is a TLS scheduler: this client needs {' and '.join(missing)}")
    tls = ClientTls(security, named)
    _load(tls)
    try:  # Dask's own context, as the connection will build it
        tls.security.get_connection_args("client")  # type: ignore[no-untyped-call]
    except (OSError, ValueError) as exc:
        raise SchedulerError(f"{address}: the TLS settings cannot be used: {exc}") from None
    return tls


def _load(tls: ClientTls) -> None:
    """Read each TLS file and load the CA, the certificate and its key, so a bad one is
    named: unreadable, not a regular file (a FIFO would block), no PEM certificate in it, a
    key that is not the certificate's, or one encrypted with a passphrase (Dask would ask
    for it on the terminal)."""
    sec = tls.security
    ca, cert, key = (getattr(sec, name) for _, name, _ in TLS_SETTINGS)
    if any("\n" in v for v in (ca, cert, key) if v is not None):
        return  # PEM text given in Dask's configuration: Dask's own load says what is wrong
    for name in tls.named:
        path = getattr(sec, name)
        try:
            regular = stat.S_ISREG(os.stat(path).st_mode)
            if regular:
                with open(path, "rb") as f:
                    f.read(1)
        except OSError as exc:
            raise SchedulerError(f"{tls.name(name)}: cannot be read: {exc.strerror or exc}") from None
        if not regular:
            raise SchedulerError(f"{tls.name(name)}: not a regular file")
    for name, path in (("tls_ca_file", ca), ("tls_client_cert", cert)):
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
        except ssl.SSLError as exc:
            raise SchedulerError(f"{tls.name(name)}: holds no PEM certificate ({exc.reason or exc})") from None

    def encrypted() -> bytes:
        raise SchedulerError(f"{tls.name('tls_client_key' if key else 'tls_client_cert')}: the key is encrypted "
                             "with a passphrase; Dask reads only an unencrypted key")

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert, key, password=encrypted)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise SchedulerError(f"{tls.name('tls_client_key')} is not the key of {tls.name('tls_client_cert')}") \
                from None
        if key is None:
            raise SchedulerError(f"{tls.name('tls_client_cert')}: holds no private key (give --tls-key)") from None
        raise SchedulerError(f"{tls.name('tls_client_key')}: holds no PEM private key ({exc.reason or exc})") from None


@contextlib.contextmanager
def connect(address: str, *, workers: int, tls: ClientTls | None = None,
            timeout: str = CONNECT_TIMEOUT) -> Iterator[Client]:
    """A client of the scheduler at ``address`` (``tcp://host:port``, or ``tls://host:port``
    with ``tls``, by default ``client_tls(address)``: Dask's configuration), or of a
    LocalCluster of ``workers`` single-threaded worker processes started here
    (``address == "local"``, on 127.0.0.1), closed (and the cluster stopped)
    on exit. A scheduler not reached within ``timeout``, or a refused handshake, is a
    SchedulerError."""
    check_address(address)
    require_dask()
    from distributed import Client, LocalCluster

    if address == "local":
        # The workers leave a Ctrl-C to this process, which stops them as it stops the run:
        # each would otherwise print its own traceback. (A process started with SIGINT
        # ignored keeps it ignored.) Dask serves HTTP whatever dashboard_address says
        # (dask/distributed#8136): a free port of 127.0.0.1, so a busy 8787 is no warning.
        on_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if on_main else None
        try:
            cluster = LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
        finally:
            if on_main:
                signal.signal(signal.SIGINT, previous)
        with cluster, Client(cluster) as client:  # type: ignore[no-untyped-call]
            yield client
        return
    if tls is None:
        tls = client_tls(address)
    failure: SchedulerError | None = None
    try:
        client = Client(address, timeout=timeout, security=tls.security if tls else None)  # type: ignore[no-untyped-call]
    # RuntimeError: Dask's configuration requires encryption; ValueError: tornado's, for a
    # connection closed before its TLS handshake (the address itself was checked above).
    except (OSError, RuntimeError, ValueError) as exc:
        failure = _refused(address, exc, tls, timeout)
    if failure is not None:
        # The half-built Client is garbage once the exception is gone, and its __del__ closes
        # its event loop under a lock the next Client's construction holds: collected here,
        # where no such lock is held, it cannot meet a later connect of this process.
        gc.collect()
        raise failure
    with client:
        yield client


_SSL_REASON = re.compile(r"\[SSL: ([A-Z0-9_]+)\]")
_DASK_WHERE = re.compile(r"^in <[^>]*>: ")


def _refused(address: str, exc: BaseException, tls: ClientTls | None, timeout: str) -> SchedulerError:
    """Why the connection to ``address`` failed, in one line: the scheduler's certificate
    not signed by our CA, ours refused by the scheduler, no TLS at the other end, or not
    reached within ``timeout`` (Dask's own words, without its connection's repr)."""
    from distributed.comm.core import CommClosedError

    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or link.__context__
    text = _DASK_WHERE.sub("", str(exc)) or type(exc).__name__
    if tls is not None:
        verify = next((e for e in chain if isinstance(e, ssl.SSLCertVerificationError)), None)
        if verify is not None:
            return SchedulerError(f"{address}: the scheduler's certificate is not trusted by "
                                  f"{tls.name('tls_ca_file')} ({verify.verify_message})")
        reasons = [m.group(1) for e in chain for m in [_SSL_REASON.search(str(e))] if m]
        reasons += [e.reason for e in chain if isinstance(e, ssl.SSLError) and e.reason]
        alert = next((r for r in reasons if "ALERT" in r), None)
        if alert is not None:
            return SchedulerError(f"the scheduler at {address} refused this client's certificate "
                                  f"{tls.name('tls_client_cert')} ({alert.lower()})")
        if "WRONG_VERSION_NUMBER" in reasons or isinstance(exc, ValueError):
            return SchedulerError(f"the scheduler at {address} does not speak TLS ({text}): a tcp:// scheduler?")
    if isinstance(exc, CommClosedError):
        if tls is not None:
            # TLS 1.3: a scheduler that refuses the client's certificate may close the
            # connection before its alert is read.
            return SchedulerError(f"the scheduler at {address} closed the connection during the TLS handshake "
                                  f"({text}); does its CA sign {tls.name('tls_client_cert')}?")
        return SchedulerError(f"the scheduler at {address} closed the connection ({text}); a TLS scheduler? "
                              "connect to it with tls://")
    cause = next((e for e in chain[1:] if isinstance(e, OSError)), None)
    if cause is not None:  # Dask's "Timed out trying to connect", the last failure its cause
        return SchedulerError(f"cannot reach the scheduler at {address} within {timeout}: "
                              f"{_DASK_WHERE.sub('', str(cause)) or type(cause).__name__}")
    return SchedulerError(f"cannot connect to the scheduler at {address}: {text}")


def slots_by_host(client: Client) -> dict[str, int]:
    """Per host, how many tasks the cluster's workers there run at once (their threads)."""
    slots: dict[str, int] = defaultdict(int)
    for worker in client.scheduler_info().get("workers", {}).values():
        slots[str(worker.get("host"))] += int(worker.get("nthreads") or 1)
    return dict(slots)


def _logged(fn: Callable[[Any], Any], task: Any, slots: dict[str, int]) -> Any:
    """Run ``fn(task)`` on a worker, first logging the start on the scheduler (the count of
    starts per task is how a report knows it ran more than once), with its share of the
    worker's host as its thread budget (``slots``: per host, the tasks run there at once; a
    host that joined after the run began counts this worker's own threads)."""
    from distributed import get_worker
    from distributed.comm.addressing import get_address_host

    worker = get_worker()
    worker.log_event(START_TOPIC, {"key": str(worker.get_current_task())})
    here = slots.get(get_address_host(worker.address), worker.state.nthreads)
    with cores.limit(cores.share(here)):
        return fn(task)


@dataclass(slots=True)
class _Ledger:
    """One ledger's tasks and what they answered."""

    ledger: FleetLedger
    check: TaskOutcome | None = None
    ranges: list[RangeOutcome | None] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    pending: int = 0
    split: bool = False


def run_on_cluster(client: Client, ledgers: Sequence[FleetLedger], options: dict[str, Any], *,
                   split: bool, range_bytes: int, retries: int = DEFAULT_RETRIES,
                   on_result: Callable[[LedgerResult], None] | None = None) -> list[LedgerResult]:
    """Check every ledger on the cluster ``client`` is connected to; results in the order
    of ``ledgers``. ``split``: the options allow a verify split into block ranges."""
    run = uuid.uuid4().hex[:12]
    with _starts_of(client, run) as starts:
        return _run(client, ledgers, options, split, range_bytes, retries, on_result, run, starts)


def _run(client: Client, ledgers: Sequence[FleetLedger], options: dict[str, Any], split: bool, range_bytes: int,
         retries: int, on_result: Callable[[LedgerResult], None] | None, run: str,
         starts: dict[str, int]) -> list[LedgerResult]:
    from distributed import as_completed

    slots = slots_by_host(client)
    state = [_Ledger(ledger) for ledger in ledgers]
    meta: dict[str, tuple[int, int]] = {}  # key -> (ledger, range index or -1 for the check)
    results: list[LedgerResult | None] = [None] * len(ledgers)

    def submit(fn: Callable[[Any], Any], task: Any, key: str, i: int, j: int) -> Future[Any]:
        meta[key] = (i, j)
        state[i].keys.append(key)
        state[i].pending += 1
        return client.submit(_logged, fn, task, slots, key=key, retries=retries, priority=state[i].ledger.size)

    futures = []
    for i in sorted(range(len(ledgers)), key=lambda k: -ledgers[k].size):
        s = state[i]
        s.split = bool(split and options.get("verify_bodies") and s.ledger.archive_size > range_bytes)
        if s.split:
            whole = {k: v for k, v in options.items() if k != "verify_bodies"}
            futures.append(submit(check_task, task_for(s.ledger, whole), f"capsem-check-{run}-{i}", i, -1))
            spans = block_ranges(s.ledger.archive_size, range_bytes)
            s.ranges = [None] * len(spans)
            for j, (lo, hi) in enumerate(spans):
                futures.append(submit(range_task, RangeTask(s.ledger.db_path, lo, hi), f"capsem-range-{run}-{i}-{j}",
                                      i, j))
        else:
            futures.append(submit(check_task, task_for(s.ledger, options), f"capsem-check-{run}-{i}", i, -1))

    done = as_completed(futures)  # type: ignore[no-untyped-call]
    for future in done:
        i, j = meta[str(future.key)]
        s = state[i]
        s.pending -= 1
        answer = _answer(future, s.ledger, j)
        if j < 0:
            assert isinstance(answer, TaskOutcome)
            s.check = answer
        else:
            assert isinstance(answer, RangeOutcome)
            s.ranges[j] = answer
        future.release()
        if s.pending:
            continue
        result = _finish(s)
        if result is None:
            # The ranges could not stand for one verify (a range unreadable, or the ledger
            # changed meanwhile): check it again as one task.
            s.split = False
            again = submit(check_task, task_for(s.ledger, options), f"capsem-again-{run}-{i}", i, -1)
            done.add(again)  # type: ignore[no-untyped-call]
            continue
        results[i] = result
        if on_result is not None:
            on_result(result)
    _attempts(client, state, results, starts)
    return [r for r in results if r is not None]


# Runs on one client at once share its one handler of START_TOPIC: each run's starts by key.
_runs_by_client: dict[str, dict[str, dict[str, int]]] = {}
_runs_lock = threading.Lock()


@contextlib.contextmanager
def _starts_of(client: Client, run: str) -> Iterator[dict[str, int]]:
    """The start events of this run's tasks, counted by key as the scheduler forwards them.
    The scheduler keeps only the last ``distributed.admin.low-level-log-length`` events of a
    topic (1000 by default), so a run of more tasks than that cannot count them afterwards."""
    starts: dict[str, int] = defaultdict(int)
    with _runs_lock:
        runs = _runs_by_client.setdefault(client.id, {})
        if not runs:
            client.subscribe_topic(START_TOPIC, lambda event, runs=runs: _count_start(runs, event))  # type: ignore[no-untyped-call]
        runs[run] = starts
    try:
        yield starts
    finally:
        with _runs_lock:
            del runs[run]
            if not runs:
                del _runs_by_client[client.id]
                with contextlib.suppress(Exception):   # a client already closed forwards nothing more
                    client.unsubscribe_topic(START_TOPIC)  # type: ignore[no-untyped-call]


def _count_start(runs: dict[str, dict[str, int]], event: Any) -> None:
    """(On the client's event loop.) One task started: counted for the run its key names."""
    try:
        key = str(event[1].get("key"))
    except (TypeError, IndexError, AttributeError):
        return
    with _runs_lock:
        for run, starts in runs.items():
            if f"-{run}-" in key:
                starts[key] += 1


def _answer(future: Future[Any], ledger: FleetLedger, j: int) -> TaskOutcome | RangeOutcome:
    """A task's answer; a task that failed for good (raised past its retries, or killed every
    worker that took it) becomes the answer of a ledger that could not be checked."""
    from distributed import KilledWorker

    try:
        value: TaskOutcome | RangeOutcome = future.result()
        return value
    except KilledWorker as exc:
        text = f"every worker that took its check died (the last: {exc.last_worker.address})"
    except Exception as exc:  # the task's own failure, after its retries
        text = failure_text(exc)
    message = f"{ledger.db_path}: {text}"
    return TaskOutcome(None, message, 0.0, "") if j < 0 else RangeOutcome(error=message)


def _finish(s: _Ledger) -> LedgerResult | None:
    check = s.check
    assert check is not None
    seconds = check.seconds
    report = check.report
    if s.split and report is not None:
        ranges = [r for r in s.ranges if r is not None]
        seconds += sum(r.seconds for r in ranges)
        report = merge_split(report, ranges)
        if report is None:
            return None
    return LedgerResult(s.ledger, report, check.error, seconds, check.worker or None,
                        tasks=1 + (len(s.ranges) if s.split else 0))


def _attempts(client: Client, state: Sequence[_Ledger], results: Sequence[LedgerResult | None],
              counted: dict[str, int]) -> None:
    """Per ledger: how many times its tasks started, and why any ran again (from the start
    events the tasks logged, as they came and as the scheduler still holds them, and the
    scheduler's record of the workers it lost)."""
    held: dict[str, int] = defaultdict(int)
    for _, msg in client.get_events(START_TOPIC):
        held[str(msg.get("key"))] += 1
    with _runs_lock:
        starts = {key: max(counted.get(key, 0), held.get(key, 0)) for key in {*counted, *held}}
    lost: dict[str, list[str]] = defaultdict(list)
    for _, msg in client.get_events("all"):
        if isinstance(msg, dict) and msg.get("action") == "remove-worker" and not msg.get("expected"):
            for key in msg.get("processing-tasks") or ():
                lost[str(key)].append(str(msg.get("worker")))
    for s, result in zip(state, results):
        if result is None:
            continue
        retried: list[str] = []
        attempts = 0
        for key in s.keys:
            died = lost.get(key, [])
            attempts += max(starts.get(key, 0), 1 + len(died))
            what = "a block range" if "-range-" in key else "its check"
            retried += [f"worker {w} died while it held {what}; run again" for w in died]
            raised = starts.get(key, 0) - 1 - len(died)
            if raised > 0:
                retried.append(f"{what} raised and was retried {raised} time{'s' if raised != 1 else ''}")
            if key.startswith("capsem-again-"):
                retried.append("its block ranges could not be joined (one unreadable, or the ledger changed "
                               "meanwhile); checked again as one task")
        result.attempts = max(attempts, 1)
        result.retried = retried


__all__ = ["CONNECT_TIMEOUT", "DEFAULT_RETRIES", "INSTALL_HINT", "SCHEMES", "START_TOPIC", "TLS_SETTINGS", "ClientTls",
           "DaskMissing", "SchedulerError", "check_address", "client_tls", "connect", "require_dask",
           "run_on_cluster"]
