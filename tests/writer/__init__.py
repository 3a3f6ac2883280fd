"""The writer package's tests: the archive appender, the ledger writer, crashes, interrupts, concurrency."""
