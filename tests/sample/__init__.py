"""Tests of capsem_core.sample: the sample ledgers and homes, and the sample command."""
