"""pytest's root: putting this directory on sys.path lets tests/ and bench/ both import the
shared ``oracles`` package and ``tests.reliability_helpers``."""
