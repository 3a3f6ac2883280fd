"""Exports of a ledger that need none of our code to read: every body to a file of its own
with a manifest (``files.py``), or the session as one WARC 1.1 file.

``warc.py`` walks the bodies and writes the file, ``warc_fields.py`` says what each record
holds (Capsem's own export's format), ``warc_sources.py`` finds each body's source row in
bulk and ``warc_summary.py`` counts what was written and skipped. ``Ledger.export_warc`` is
the way in; ``capsem-ledger export --warc`` the command.
"""

from capsem_core.export.warc_summary import MAX_SKIPPED_SAMPLE, SKIP_REASONS, SkippedBody, WarcSummary

__all__ = ["MAX_SKIPPED_SAMPLE", "SKIP_REASONS", "SkippedBody", "WarcSummary"]
