"""Tests of capsem_core.bodies: the index as arrays, bulk reads, batches and the block cache."""
