"""Tests of capsem_core.fleet and check --all: discovery, the local runner, the Dask runner."""
