"""One Capsem home: where main.db and the ledgers live, and which words may name a session.

The paths come from ``CAPSEM_HOME`` and ``CAPSEM_RUN_DIR`` as Capsem reads them. Session ids
and VM names become directory names under the run directory, so every word is held to a
short allowlist before any path is built from it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from capsem_core.errors import LedgerError

# Letters, digits, '.', '_' and '-', starting with a letter or digit: nothing that could
# climb out of the run directory or be read as an option.
MAX_SESSION_WORD = 128
_SESSION_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True, slots=True)
class Home:
    """One Capsem home: the rollup database and the run directory that holds ledgers."""

    home: Path
    run: Path

    @property
    def main_db(self) -> Path:
        return self.home / "sessions" / "main.db"

    @property
    def sessions_root(self) -> Path:
        return self.run / "sessions"

    @property
    def persistent_root(self) -> Path:
        return self.run / "persistent"


def capsem_home(environ: Mapping[str, str] | None = None) -> Path:
    """``$CAPSEM_HOME``, default ``~/.capsem``."""
    env = os.environ if environ is None else environ
    value = env.get("CAPSEM_HOME")
    return Path(value) if value else Path.home() / ".capsem"


def run_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$CAPSEM_RUN_DIR``, default ``$CAPSEM_HOME/run``."""
    env = os.environ if environ is None else environ
    value = env.get("CAPSEM_RUN_DIR")
    return Path(value) if value else capsem_home(env) / "run"


def main_db_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$CAPSEM_HOME/sessions/main.db``."""
    return capsem_home(environ) / "sessions" / "main.db"


def home_layout(home: Home | os.PathLike[str] | str | None = None,
                environ: Mapping[str, str] | None = None) -> Home:
    """The layout to use: from the environment when ``home`` is None; an explicit home path
    is self-contained (its run directory is ``<home>/run``, whatever the environment says)."""
    if isinstance(home, Home):
        return home
    if home is None:
        return Home(capsem_home(environ), run_dir(environ))
    return Home(Path(home), Path(home) / "run")


# --- session words (ids and display names) -------------------------------------------------

def is_session_word(word: str) -> bool:
    """True when ``word`` may name a session directory (the fast test, for directory scans)."""
    return len(word) <= MAX_SESSION_WORD and _SESSION_WORD.fullmatch(word) is not None


def session_word_problem(word: object) -> str | None:
    """Why ``word`` cannot name a session directory, or None when it can."""
    if isinstance(word, str) and is_session_word(word):
        return None
    if not isinstance(word, str):
        return f"a session id or name must be text, not {type(word).__name__}"
    if word == "":
        return "it is empty"
    if "\0" in word:
        return "it contains a NUL byte"
    if "/" in word or "\\" in word:
        return "it contains a path separator"
    if word in (".", ".."):
        return "it names a directory itself, not a session"
    if word.startswith("-"):
        return "it starts with '-'"
    if word.startswith("."):
        return "it starts with '.'"
    if len(word) > MAX_SESSION_WORD:
        return f"it is {len(word)} characters long, more than {MAX_SESSION_WORD}"
    return "only letters, digits, '.', '_' and '-' may name a session"


def check_session_word(word: object, what: str = "session") -> str:
    """Return ``word`` if it may name a session directory, else raise LedgerError.

    Runs before any path is built from the word, so nothing outside the run directory is
    ever touched on its behalf."""
    problem = session_word_problem(word)
    if problem is not None or not isinstance(word, str):
        raise LedgerError(f"refusing {what} {word!r}: {problem}")
    return word
