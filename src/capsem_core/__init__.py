"""capsem-core: read, verify and write Capsem session ledgers (session.db + session.bodies)."""

__version__ = "0.1.0"
