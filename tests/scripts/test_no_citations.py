"""The project owns its semantics: no tracked file cites the old contract users do not have ("SPEC", "SPEC §N",
"SPEC.md") or an issue number ("issue #N", "issues #N", "(#N)"); code and docs cite docs/FILE.md instead, TAP.
Prints the count per kind and the first places found.
    /usr/bin/python3 tests/scripts/test_no_citations.py"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KINDS = {
    # SPEC as a word, not a placeholder (--alias NAME=SPEC, "a model SPEC: ...") or an identifier (SPECS)
    "SPEC": re.compile(r"(?<![=_A-Za-z])SPEC(?![A-Za-z_=:]| =)|SPEC\s*§|SPEC's|SPEC\.md"),
    "issue number": re.compile(r"\bissues? #\d+|\(#\d+\b|\bissue \d+\b|#\d+'s\b"),
}
SELF = os.path.relpath(os.path.abspath(__file__), ROOT)
TEXT = (".c", ".h", ".cu", ".py", ".sh", ".md", ".mjs", ".txt", ".gp", ".json", "Makefile", ".in", ".toml", ".cfg")


def tracked():
    out = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True)
    if out.returncode != 0:  # not a git checkout (a tarball): every file under the tree
        return [os.path.relpath(os.path.join(d, f), ROOT) for d, _, fs in os.walk(ROOT) for f in fs
                if not d.startswith(os.path.join(ROOT, "build"))]
    return out.stdout.splitlines()


def main():
    found = {k: [] for k in KINDS}
    files = [f for f in tracked() if f.endswith(TEXT) and f != SELF and "/fixtures/" not in f]
    for rel in files:
        try:
            with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for n, line in enumerate(lines, 1):
            for kind, rx in KINDS.items():
                if rx.search(line):
                    found[kind].append("%s:%d: %s" % (rel, n, line.strip()[:100]))
    print("# %d tracked text files read" % len(files))
    for kind, places in found.items():
        check(not places, "no %s citation in the tree (%d found)" % (kind, len(places)), "\n".join(places[:12]))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
