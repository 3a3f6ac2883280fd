"""capsem-core: read, verify and write Capsem session ledgers (session.db + session.bodies)."""

# The one place the version is written: pyproject.toml reads it from here at build time.
__version__ = "0.1.0"
