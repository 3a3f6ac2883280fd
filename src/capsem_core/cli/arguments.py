"""Argument types the commands share, so one option means one rule everywhere."""

from __future__ import annotations

import argparse


def whole_number(text: str) -> int:
    """A count given on the command line: a whole number, zero or more (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


__all__ = ["whole_number"]
