"""The vocabulary of every sample: word, code, path and command-output pools, the domains and
commands a session touches, and the deterministic helpers that draw text from them.

The pools are built once, from a fixed seed independent of the session seed: they are the
"language" of every sample; the session seed only decides what is said. Text is cheap by
construction: sentences, code lines and command output lines are drawn from the pools
(Zipf-weighted, so common ones repeat the way real sessions repeat) and joined; nothing is
generated character by character.
"""

from __future__ import annotations

import random
from itertools import accumulate

WORDS = """
the a an to of and in is that for it on with as this be are by we not or from at if
when then so but all any each every some more most less other only just also still
can will should must may might would could does did has have had was were been being
file files function test tests module value values return returns error errors config
build run runs running session ledger body bodies block blocks segment index row rows
table tables column query schema writer reader archive hash digest check verify result
results output input request response stream event events trace turn model tool tools
call calls provider token tokens cost path paths directory process command exit code
line lines change changes patch diff commit branch merge review comment issue issues
type types class method field argument arguments option options default flag flags
cache memory disk size length offset limit bound bounds buffer parse parser format
status state update create delete read write open close flush sync commit rollback
first last next previous new old same different whole part empty full small large
fast slow simple clear correct wrong broken fixed missing found expected actual
because since while until after before during inside outside between against without
need needs want wants use uses used make makes made look looks see shows show keep
add adds added remove removes removed move moves rename fix fixes handle handles
user users agent agents system prompt context history message messages reply answer
server client network domain policy rule rules decision allow block ask denied allowed
data database record records entry entries list lists map key keys item items count
number numbers string strings bytes byte text json header headers payload preview
now here there where which what who how why yes no ok done good better best work
works working worked step steps plan plans idea approach problem problems case cases
time timeout retry again once twice often never always usually probably likely
python rust sqlite cython numpy pytest docker linux shell script scripts package
install installed version versions release dependency dependencies import imports
""".split()

IDENT_NOUNS = """
ledger block segment body index row table writer reader archive digest cursor span
extent session trace turn model tool call provider token path config cache buffer
parser record entry item payload header stream event policy rule decision client
server request response result report summary counter metric batch queue worker
""".split()
IDENT_VERBS = """
read write parse build check verify load store open close flush sync scan seal stage
append insert update delete fetch resolve compute merge split encode decode hash
""".split()
MODULES = """
os sys json re time sqlite3 pathlib typing dataclasses itertools functools collections
argparse logging hashlib zlib struct asyncio subprocess shutil tempfile contextlib
""".split()
ERROR_NAMES = "ValueError KeyError TypeError RuntimeError OSError LedgerError IndexError".split()


def _zipf_cum(n: int, s: float) -> list[float]:
    return list(accumulate(1.0 / (i + 1) ** s for i in range(n)))


class Pools:
    """Fixed pools of sentences, code lines and command-output lines, with Zipf weights."""

    def __init__(self) -> None:
        r = random.Random(0x5A4D_91E)
        words = WORDS
        self.sentences: list[str] = []
        for _ in range(2400):
            n = r.randint(5, 17)
            ws = [words[min(int(r.paretovariate(1.1)) - 1, len(words) - 1)] if r.random() < 0.3
                  else r.choice(words) for _ in range(n)]
            if r.random() < 0.18:
                ws.insert(r.randrange(len(ws)), f"`{self._ident(r)}`")
            s = " ".join(ws)
            self.sentences.append(s[0].upper() + s[1:] + r.choice(".....?:"))
        self.sentence_cum = _zipf_cum(len(self.sentences), 1.05)
        self.avg_sentence = sum(len(s) + 1 for s in self.sentences) / len(self.sentences)

        self.code: list[str] = [self._code_line(r) for _ in range(3000)]
        self.code_cum = _zipf_cum(len(self.code), 0.9)
        self.avg_code = sum(len(s) + 1 for s in self.code) / len(self.code)

        self.paths: list[str] = []
        tops = ["src/capsem_core", "src/capsem_core/cli", "tests", "tests/golden", "docs",
                "bench", "scripts", "cext", "examples", "tools"]
        for _ in range(260):
            top = r.choice(tops)
            ext = r.choice([".py", ".py", ".py", ".md", ".c", ".h", ".pyx", ".toml", ".json"])
            self.paths.append(f"{top}/{r.choice(IDENT_VERBS)}_{r.choice(IDENT_NOUNS)}{ext}")
        self.paths = sorted(set(self.paths))

        self.shell: dict[str, list[str]] = {
            "pytest": [f"tests/test_{r.choice(IDENT_NOUNS)}.py::test_{r.choice(IDENT_VERBS)}_"
                       f"{r.choice(IDENT_NOUNS)} {r.choice(['PASSED', 'PASSED', 'PASSED', 'FAILED', 'SKIPPED'])}"
                       f" [{r.randint(1, 100):3d}%]" for _ in range(400)],
            "git": [f"{r.getrandbits(28):07x} {self.sentences[r.randrange(300)][:60]}" for _ in range(300)],
            "ls": [f"-rw-r--r-- 1 dev dev {r.randint(80, 90000):6d} Jun {r.randint(1, 30):2d} "
                   f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d} {r.choice(self.paths).rsplit('/', 1)[-1]}"
                   for _ in range(300)],
            "pip": [f"{r.choice(['Collecting', 'Downloading', 'Requirement already satisfied:', 'Using cached'])} "
                    f"{r.choice(IDENT_NOUNS)}{r.choice(['', '-py', '-core', 'lib'])}=="
                    f"{r.randint(0, 5)}.{r.randint(0, 30)}.{r.randint(0, 9)}" for _ in range(200)],
            "grep": [f"{r.choice(self.paths)}:{r.randint(1, 900)}:{self.code[r.randrange(400)].strip()}"
                     for _ in range(400)],
            "build": [f"{r.choice(['-- ', '[ 12%] ', '[ 50%] ', '[100%] ', 'warning: ', 'note: '])}"
                      f"{self.sentences[r.randrange(200)][:70]}" for _ in range(200)],
        }
        self.shell_cum = {k: _zipf_cum(len(v), 0.8) for k, v in self.shell.items()}

        self.html_head = ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>'
                          'Documentation</title><link rel="stylesheet" href="/static/site.css">'
                          '</head><body><nav class="top"><a href="/">Home</a> <a href="/docs/">Docs</a>'
                          ' <a href="/api/">API</a> <a href="/blog/">Blog</a></nav><main>')
        self.html_tail = '</main><footer class="site">Built with care.</footer></body></html>'

    @staticmethod
    def _ident(r: random.Random) -> str:
        return f"{r.choice(IDENT_VERBS)}_{r.choice(IDENT_NOUNS)}"

    def _code_line(self, r: random.Random) -> str:
        noun, noun2 = r.choice(IDENT_NOUNS), r.choice(IDENT_NOUNS)
        fn = self._ident(r)
        cls = noun.capitalize() + noun2.capitalize()
        ind = "    " * r.choice([0, 1, 1, 2, 2, 2, 3])
        forms = [
            f"def {fn}({noun}, {noun2}=None):",
            f"{ind}{noun} = {fn}({noun2})",
            f"{ind}if {noun} is None:",
            f"{ind}return {noun}",
            f"{ind}for {noun} in {noun2}s:",
            f"{ind}{noun}s.append({fn}({noun2}))",
            f"import {r.choice(MODULES)}",
            f"from {r.choice(MODULES)} import {noun}",
            f"class {cls}:",
            f"{ind}# {r.choice(WORDS)} {r.choice(WORDS)} {noun} {r.choice(WORDS)} {noun2}",
            f'{ind}raise {r.choice(ERROR_NAMES)}(f"{noun} {r.choice(WORDS)} {{{noun2}!r}}")',
            f"{ind}assert {noun}.{noun2} == {r.randint(0, 4096)}",
            f"{ind}self.{noun} = {noun2}",
            f"{ind}with open({noun}, 'rb') as {noun2}:",
            "",
        ]
        return r.choice(forms)

    # --- drawing text -----------------------------------------------------------------------

    def prose(self, r: random.Random, nbytes: int) -> str:
        k = max(1, int(nbytes / self.avg_sentence) + 1)
        return " ".join(r.choices(self.sentences, cum_weights=self.sentence_cum, k=k))

    def sentences_k(self, r: random.Random, k: int) -> str:
        return " ".join(r.choices(self.sentences, cum_weights=self.sentence_cum, k=max(1, k)))

    def code_text(self, r: random.Random, nbytes: int) -> str:
        k = max(1, int(nbytes / self.avg_code) + 1)
        return "\n".join(r.choices(self.code, cum_weights=self.code_cum, k=k))

    def shell_lines(self, r: random.Random, kind: str, k: int) -> str:
        return "\n".join(r.choices(self.shell[kind], cum_weights=self.shell_cum[kind], k=max(1, k)))


# Built on first use: building takes a moment, and a process that never samples never pays it.
_SHARED: Pools | None = None


def shared_pools() -> Pools:
    global _SHARED
    if _SHARED is None:
        _SHARED = Pools()
    return _SHARED


# Identifier alphabets: base58 (Anthropic ids, signatures) and alphanumerics (OpenAI ids).
B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

# --- where a session goes and what it runs ------------------------------------------------

ALLOWED_DOMAINS = ("pypi.org", "files.pythonhosted.org", "github.com", "codeload.github.com",
                   "registry.npmjs.org", "docs.python.org", "sqlite.org", "api.githubcopilot.com")
# The first three are telemetry endpoints the policy blocks; pastebin.com is asked about.
DENIED_DOMAINS = ("o4504.ingest.sentry.io", "api.segment.io", "http-intake.logs.datadoghq.com",
                  "pastebin.com")
# The GitHub MCP server: (domain, path).
MCP_URL = ("api.githubcopilot.com", "/mcp/")

# Shell commands by kind; the kind decides the output pool and the side effects.
SHELL_CMDS: dict[str, tuple[str, ...]] = {
    "pytest": ("python3 -m pytest tests/ -q", "python3 -m pytest tests/test_writer.py -x -q",
               "python3 -m pytest -k verify -q"),
    "git": ("git status --short", "git log --oneline -n 20", "git diff --stat", "git push origin HEAD"),
    "ls": ("ls -la src/capsem_core", "ls tests", "find . -name '*.py' | head -50"),
    "pip": ("pip install zstandard", "pip install -e .", "pip install blake3 pytest-benchmark"),
    "build": ("scripts/dev-build", "make -j2", "cmake --build build"),
    "grep": ("grep -rn 'flush' src/", "rg -n 'segment' cext/", "grep -rn 'TODO' ."),
}
# The executable each kind of shell command runs, as the audit rows name it.
EXE = {"pytest": "/usr/bin/python3", "git": "/usr/bin/git", "ls": "/usr/bin/ls", "pip": "/usr/local/bin/pip",
       "build": "/usr/bin/make", "grep": "/usr/bin/grep"}
# The workspace a session clones and works in.
FS_TOP = "/workspace/capsem-core"
