"""A task for the local runner's crash test, in a module of its own so that each task's
process imports nothing more than it needs."""

from __future__ import annotations

import os
import signal


def answer_or_crash(n: int) -> int:
    """n * 10; task 2 dies of SIGSEGV, task 3 raises."""
    if n == 2:
        os.kill(os.getpid(), signal.SIGSEGV)
    if n == 3:
        raise RuntimeError("this task broke")
    return n * 10
