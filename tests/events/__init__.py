"""Tests of capsem_core.events: the event tables, the cursor, pages and following."""
