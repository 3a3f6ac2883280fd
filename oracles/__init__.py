"""Independent oracles that tests and benchmarks both use (never the code under test).

* ``archive_reader``: a pure-Python reader of session.bodies, written from the format facts
  alone, that every test compares the native reader, writer and verifier against;
* ``baseline_verify``: the careful pure-Python verifier the verify benchmarks beat;
* ``verify_floor``: only the work no verifier can skip (one inflate per block, the two
  hashes per byte), the floor the verify kernel is measured against;
* ``peak_memory``: a capsem-ledger command run in a child that measures its own time and
  peak resident size (anonymous and file-backed parts).
"""
