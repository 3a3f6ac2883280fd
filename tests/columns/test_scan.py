"""Ledger.scan: every table as Arrow record batches equal, value for value, to SELECT * in
rowid order, from the pages and through SQLite; the types a column's storage classes give it;
the real consumers (pyarrow, polars, DuckDB) reading the stream directly; the arguments'
errors; damaged pages that never crash or mislead."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from pathlib import Path

import duckdb
import polars
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from capsem_core import schema
from capsem_core.columns.scan import open_scan
from capsem_core.errors import LedgerError
from capsem_core.ledger import Ledger
from capsem_core.sample import write_sample_ledger
from capsem_core.writer import LedgerWriter
from tests.columns.ledgers import assert_same_rows, check_every_table, poke, rows_of, select_star


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("scan") / "ledger"
    write_sample_ledger(directory, seed=3, bodies=1500)
    return directory


@pytest.fixture(scope="module")
def empty_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("scan-empty") / "ledger"
    LedgerWriter(directory).close()
    return directory


def test_every_table_of_a_sample_ledger_scans_to_its_rows_from_the_pages(sample: Path) -> None:
    paths = check_every_table(sample)
    assert set(paths.values()) == {"pages"}


def test_every_table_of_a_sample_ledger_scans_to_its_rows_through_sqlite(sample: Path) -> None:
    assert set(check_every_table(sample, path="rows").values()) == {"rows"}


def test_the_pages_are_not_read_when_page_scans_are_turned_off(sample: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPSEM_CORE_PAGE_SCANS", "0")
    with Ledger(sample) as ledger:
        assert ledger.scan("net_events").path == "rows"


def test_every_table_of_an_empty_ledger_is_typed_by_its_declared_affinity(empty_ledger: Path) -> None:
    check_every_table(empty_ledger)
    with Ledger(empty_ledger) as ledger:
        table = pa.table(ledger.scan("model_calls"))
    assert table.num_rows == 0
    types = dict(zip(table.schema.names, table.schema.types))
    assert types["id"] == pa.int64() and types["event_id"] == pa.string()
    assert types["estimated_cost_usd"] == pa.float64()


def test_a_column_of_one_storage_class_is_a_plain_nullable_arrow_type(sample: Path) -> None:
    with Ledger(sample) as ledger:
        scan = ledger.scan("net_events")
        classes = scan.classes
        table = pa.table(scan)
    types = dict(zip(table.schema.names, table.schema.types))
    assert types["id"] == pa.int64() and types["domain"] == pa.string() and types["status_code"] == pa.int64()
    assert classes["id"] == ("integer",) and "union" not in str(table.schema)


def _hostile_copy(sample: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "hostile"
    copy.mkdir()
    for name in ("session.db", "session.bodies"):
        shutil.copy(sample / name, copy / name)
    return copy


def test_mixed_storage_classes_become_a_dense_union_of_them(sample: Path, tmp_path: Path) -> None:
    directory = _hostile_copy(sample, tmp_path)
    db = directory / "session.db"
    poke(db, "UPDATE net_events SET port = 'eighty' WHERE id = 1")
    poke(db, "UPDATE net_events SET port = 8.5, path = CAST(x'ff41' AS TEXT) WHERE id = 2")
    poke(db, "UPDATE net_events SET port = x'0001', path = NULL WHERE id = 3")
    poke(db, "UPDATE net_events SET path = 'p' WHERE id = 1")
    for path in (None, "rows"):
        scan = open_scan(db, "net_events", path=path)
        assert set(scan.classes["port"]) >= {"integer", "real", "text", "blob"}
        assert set(scan.classes["path"]) >= {"null", "text", "text_bytes"}
        table = pa.table(scan)
        port = table.schema.field("port").type
        assert pa.types.is_union(port) and port.mode == "dense"
        assert_same_rows(rows_of(table), select_star(db, "net_events"))
        first = table.slice(0, 3).to_pylist()
        assert [r["port"] for r in first] == ["eighty", 8.5, b"\x00\x01"]
        assert [r["path"] for r in first] == ["p", b"\xffA", None]


def test_text_that_is_not_utf8_is_carried_as_binary_never_as_utf8(sample: Path, tmp_path: Path) -> None:
    directory = _hostile_copy(sample, tmp_path)
    db = directory / "session.db"
    poke(db, "UPDATE fs_events SET path = CAST(x'c0af' AS TEXT)")  # an overlong '/': not UTF-8
    table = pa.table(open_scan(db, "fs_events"))
    assert table.schema.field("path").type == pa.binary()
    assert set(table.column("path").to_pylist()) == {b"\xc0\xaf"}
    table.validate(full=True)


def test_an_integer_stored_in_a_real_column_reads_as_real_as_sqlite_gives_it(sample: Path, tmp_path: Path) -> None:
    directory = _hostile_copy(sample, tmp_path)
    db = directory / "session.db"
    poke(db, "UPDATE model_calls SET estimated_cost_usd = 3 WHERE id = 1")  # stored as an INTEGER record value
    poke(db, "UPDATE model_calls SET estimated_cost_usd = 9007199254740993 WHERE id = 2")
    for path in (None, "rows"):
        table = pa.table(open_scan(db, "model_calls", columns=["id", "estimated_cost_usd"], path=path))
        assert table.schema.field("estimated_cost_usd").type == pa.float64()
        assert table.column("estimated_cost_usd").to_pylist()[:2] == [3.0, float(9007199254740993)]
        assert_same_rows(rows_of(table), select_star(db, "model_calls", ["id", "estimated_cost_usd"]))


_VALUES = st.one_of(
    st.none(),
    st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    st.sampled_from([0, 1, -1, (1 << 63) - 1, -(1 << 63), 1 << 48]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.integers(3000, 9000).map(lambda n: ("ab\u00e9\u4e2d" * n)[:n]),  # past one page: an overflow chain
    st.binary(max_size=40).map(lambda b: ("blob", b)),
    st.binary(max_size=40).map(lambda b: ("text", b)),  # stored as TEXT, maybe not UTF-8
    st.just(("text", b"")),
)


def _insert(db: Path, table: str, columns: list[str], rows: list[list[object]]) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute("BEGIN")
        for values in rows:
            marks, params = [], []  # NOT NULL columns the strategy left out take fixed values
            for v in values:
                if isinstance(v, tuple):
                    marks.append("CAST(? AS TEXT)" if v[0] == "text" else "?")
                    params.append(v[1])
                else:
                    marks.append("?")
                    params.append(v)
            conn.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(marks)})", params)
        conn.execute("COMMIT")
    finally:
        conn.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("template") / "ledger"
    LedgerWriter(directory).close()
    return directory


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.lists(_VALUES, min_size=4, max_size=4), min_size=0, max_size=40),
       table=st.sampled_from(["tool_responses", "model_calls", "body_blocks"]))
# Found by hypothesis: an empty text on an overflow page, in a column holding text of both kinds.
@example(rows=[[None, None, None, ("text", b"\xbe")], [None, None, "a" * 5000, ("text", b"")]],
         table="tool_responses")
def test_any_values_scan_to_what_sqlite_returns_from_the_pages_and_the_statements(
        template: Path, tmp_path_factory: pytest.TempPathFactory, rows: list[list[object]], table: str) -> None:
    directory = tmp_path_factory.mktemp("hyp")
    for name in ("session.db", "session.bodies"):
        shutil.copy(template / name, directory / name)
    db = directory / "session.db"
    columns, fixed = {
        "tool_responses": (["content_preview", "is_error", "trace_id", "turn_id"], {"model_call_id": 1, "call_id": "c"}),
        "model_calls": (["estimated_cost_usd", "messages_count", "usage_details", "pid"],
                        {"timestamp": "t", "provider": "p", "method": "GET", "path": "/"}),
        "body_blocks": (["raw_len", "disk_len", "sealed_at", "block_offset"], {}),
    }[table]
    if table == "body_blocks":  # NOT NULL columns (SQLite stores a NaN as NULL), and the rowid: distinct
        # integers, some negative or large
        rows = [[0 if v is None or v != v else v for v in values[:3]] + [i * 7919 - 40 + (1 << 40) * (i % 2)]
                for i, values in enumerate(rows)]
    _insert(db, table, columns + list(fixed), [values + list(fixed.values()) for values in rows])
    want = select_star(db, table)
    for path in (None, "rows"):
        scan = open_scan(db, table, path=path)
        got = pa.table(scan)
        got.validate(full=True)
        assert_same_rows(rows_of(got), want)


def test_a_table_holding_rows_longer_than_a_page_reads_through_their_overflow_chains(sample: Path,
                                                                                    tmp_path: Path) -> None:
    directory = _hostile_copy(sample, tmp_path)
    db = directory / "session.db"
    poke(db, "UPDATE tool_calls SET arguments = ? || id, response_preview = ? WHERE id % 3 = 0",
         ("x" * 20000, "\u00e9" * 7000))
    table = pa.table(open_scan(db, "tool_calls"))
    assert_same_rows(rows_of(table), select_star(db, "tool_calls"))
    assert open_scan(db, "tool_calls").path == "pages"


def test_values_lying_on_overflow_pages_scan_alone_empty_or_not(sample: Path, tmp_path: Path) -> None:
    # Only the columns behind a long one are asked for: theirs are the first (or the only)
    # bytes the scan takes from the overflow chain, some of them empty.
    directory = _hostile_copy(sample, tmp_path)
    db = directory / "session.db"
    poke(db, "UPDATE tool_calls SET arguments = ? || id, response_preview = CASE id % 2 WHEN 0 THEN '' "
             "ELSE CAST(? AS TEXT) END, origin = '' WHERE id % 3 = 0", ("x" * 20000, b"\xff" * 9000))
    for columns in (["response_preview"], ["origin"], ["origin", "response_preview"]):
        table = pa.table(open_scan(db, "tool_calls", columns=columns))
        table.validate(full=True)
        assert_same_rows(rows_of(table), select_star(db, "tool_calls", columns))
        assert open_scan(db, "tool_calls", columns=columns).path == "pages"


def test_chosen_columns_come_in_the_order_asked(sample: Path) -> None:
    with Ledger(sample) as ledger:
        table = pa.table(ledger.scan("dns_events", columns=["qname", "id", "rcode"]))
    assert table.schema.names == ["qname", "id", "rcode"]
    assert_same_rows(rows_of(table), select_star(sample / "session.db", "dns_events", ["qname", "id", "rcode"]))


def test_an_unknown_table_or_column_is_a_value_error_naming_what_there_is(sample: Path) -> None:
    with Ledger(sample) as ledger:
        with pytest.raises(ValueError, match="not a table of the ledger: 'nets'.*net_events, model_calls"):
            ledger.scan("nets")
        with pytest.raises(ValueError, match="not a table of the ledger"):
            ledger.scan("sqlite_sequence")
        with pytest.raises(ValueError, match=r"not a column of net_events: 'nope'; its columns are id, event_id"):
            ledger.scan("net_events", columns=["id", "nope"])
        with pytest.raises(ValueError, match="named twice"):
            ledger.scan("net_events", columns=["id", "id"])
        with pytest.raises(TypeError):
            ledger.scan("net_events", columns="id")


def test_a_scan_is_read_once(sample: Path) -> None:
    with Ledger(sample) as ledger:
        scan = ledger.scan("dns_events")
        pa.table(scan)
        with pytest.raises(RuntimeError, match="read once"):
            pa.table(scan)


def test_pyarrow_polars_and_duckdb_read_the_stream_directly(sample: Path) -> None:
    want = select_star(sample / "session.db", "net_events", ["id", "domain", "status_code"])
    with Ledger(sample) as ledger:
        frame = polars.DataFrame(ledger.scan("net_events", columns=["id", "domain", "status_code"]))
        assert frame.rows() == want
        scan_variable = ledger.scan("net_events", columns=["id", "domain", "status_code"])
        got = duckdb.sql("SELECT id, domain, status_code FROM scan_variable ORDER BY id").fetchall()
        assert got == want
        reader = pa.RecordBatchReader.from_stream(ledger.scan("event_body_blobs"))
        assert sum(batch.num_rows for batch in reader) == len(select_star(sample / "session.db", "event_body_blobs"))


def test_a_large_table_comes_in_batches_of_at_most_64k_rows(tmp_path: Path) -> None:
    directory = tmp_path / "ledger"
    LedgerWriter(directory).close()
    db = directory / "session.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 150000) "
                 "INSERT INTO transport_events (timestamp_unix_ms, event_id, event_type, network_id, event_json) "
                 "SELECT i, printf('%012x', i), 'network.probe', 'n' || (i % 7), '{}' FROM n")
    conn.close()
    for threads in (1, 3):
        reader = pa.RecordBatchReader.from_stream(open_scan(db, "transport_events", threads=threads))
        sizes = [batch.num_rows for batch in reader]
        assert sum(sizes) == 150000 and max(sizes) <= 1 << 16 and len(sizes) >= 3
    assert_same_rows(rows_of(pa.table(open_scan(db, "transport_events"))), select_star(db, "transport_events"))


def test_a_record_shorter_than_its_table_is_read_through_sqlite_with_its_default(sample: Path,
                                                                                tmp_path: Path) -> None:
    directory = _hostile_copy(sample, tmp_path)
    db = directory / "session.db"
    poke(db, "ALTER TABLE dns_events ADD COLUMN later TEXT DEFAULT 'later'")
    scan = open_scan(db, "dns_events")
    assert scan.path == "rows"  # the old records lack the column: SQLite supplies the default
    table = pa.table(scan)
    assert set(table.column("later").to_pylist()) == {"later"}
    assert_same_rows(rows_of(table), select_star(db, "dns_events"))


def _leaf_pages(db: Path, table: str) -> list[int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [p for (p,) in conn.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf'",
                                           (table,))]
    finally:
        conn.close()


def test_damaged_pages_give_sqlites_values_or_a_clear_error_never_a_crash(sample: Path, tmp_path: Path) -> None:
    db0 = sample / "session.db"
    pages = _leaf_pages(db0, "net_events")
    page_size = 4096
    rng = random.Random(7)
    outcomes = set()
    for trial in range(24):
        directory = tmp_path / f"d{trial}"
        directory.mkdir()
        shutil.copy(sample / "session.bodies", directory / "session.bodies")
        data = bytearray((db0).read_bytes())
        page = rng.choice(pages)
        for _ in range(rng.randint(1, 6)):
            at = (page - 1) * page_size + rng.randrange(0 if trial % 2 else 8, 64 if trial % 2 else page_size)
            data[at] = rng.randrange(256)
        (directory / "session.db").write_bytes(bytes(data))
        try:
            want: object = select_star(directory / "session.db", "net_events")
        except sqlite3.DatabaseError:
            want = "error"
        try:
            scan = open_scan(directory / "session.db", "net_events")
            got: object = rows_of(pa.table(scan))
            outcomes.add(scan.path)
        except LedgerError as exc:
            assert exc.path is not None and os.fspath(exc.path).endswith("session.db")
            got = "error"
        if want == "error" or got == "error":
            assert got == want == "error" or got == "error", trial
            outcomes.add("error")
        else:
            assert_same_rows(got, want)  # type: ignore[arg-type]
    assert "rows" in outcomes or "error" in outcomes  # some damage sent the scan to SQLite


def test_a_closed_ledger_scans_nothing(sample: Path) -> None:
    ledger = Ledger(sample)
    ledger.close()
    with pytest.raises(LedgerError, match="closed"):
        ledger.scan("net_events")


def test_every_table_of_the_schema_is_scannable_by_name() -> None:
    assert len(schema.TABLES) == 18
