# The two commands of the README: `make demo` and `make test`. Both set everything up first.
PY := .venv/bin/python

.PHONY: setup demo test bench
setup:
	./scripts/setup

demo: setup
	./scripts/demo

test: setup
	$(PY) -m pytest -q -p no:cacheprovider tests

# Writes docs/bench-results.md: the ratios and figures, with the machine they ran on.
bench: setup
	$(PY) -m pytest -q -s -p no:cacheprovider bench --results docs/bench-results.md
