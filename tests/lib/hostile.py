"""Hostile-input attempts for the reliability tests (docs/reliability.md): run one
kvtrace command that must be refused, classify what happened, and keep a
tally per class of failure, printed as one table line per class at the end.

Outcomes of one attempt:
  clean    exit code in the expected set, stderr's only line starts
           "kvtrace: error:", no listed output exists, no hidden temporary
           is left in the output's directory;
  crash    killed by a signal, an exit code >= 128, or a sanitizer report;
  partial  a listed output (or a hidden temporary beside it) exists after a
           non-zero exit;
  wrong    exit 0 where a refusal was expected (silently wrong), or another
           non-zero code / more than one line (misreported).

Each attempt is also one TAP check, so `tests/run_all.sh` counts it.

    import hostile
    h = hostile.Tally("force-eats-inputs")
    h.attempt("sim -o the trace's dir", ["sim", t, "-o", d, "--force"], codes=(2,), outputs=[d], keep=[t])
    ...
    hostile.report()          # "# hostile force-eats-inputs: 12 attempts, 12 clean, 0 crashes, ..."
"""
import os
import subprocess

from tap import check

KVTRACE = os.environ.get("KVTRACE", "build/kvtrace")
_TALLIES = []
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer", "SUMMARY: UndefinedBehavior")


def _hidden_temps(paths):
    """Hidden temporaries (".NAME.tmp*" or "NAME.tmp*") beside the given outputs."""
    found = []
    for p in paths:
        d = os.path.dirname(os.path.abspath(p)) or "."
        base = os.path.basename(os.path.normpath(p))
        if not os.path.isdir(d):
            continue
        for e in os.listdir(d):
            if e != base and base in e and ".tmp" in e:
                found.append(os.path.join(d, e))
    return found


def _fingerprint(path):
    """(size, mtime_ns, inode) of a file, or a sorted listing for a directory; None when absent."""
    if not os.path.exists(path):
        return None
    if os.path.isdir(path):
        return sorted(os.listdir(path))
    st = os.stat(path)
    return (st.st_size, st.st_mtime_ns, st.st_ino)


class Tally:
    def __init__(self, name):
        self.name = name
        self.counts = {"attempts": 0, "clean": 0, "crash": 0, "partial": 0, "wrong": 0}
        _TALLIES.append(self)

    def attempt(self, what, args, codes=(2, 3), outputs=(), keep=(), cwd=None, env=None, timeout=120,
                stdin=None, must_say=None):
        """Runs `kvtrace ARGS`; `outputs` must not exist afterwards (they should not exist before
        either: pass fresh paths), `keep` are inputs that must be unchanged (size, mtime, inode),
        `must_say` a substring the error line must contain. Returns the CompletedProcess."""
        before = {k: _fingerprint(k) for k in keep}
        full_env = dict(os.environ, **(env or {}))
        try:
            r = subprocess.run([KVTRACE] + list(args), capture_output=True, text=True, cwd=cwd, env=full_env,
                               timeout=timeout, stdin=stdin)
        except subprocess.TimeoutExpired:
            return self._count(what, "crash", "timed out after %d s (a hang)" % timeout)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        err_lines = [ln for ln in lines if ln.startswith("kvtrace: error:")]
        left = [o for o in outputs if os.path.exists(o)] + _hidden_temps(outputs)
        changed = [k for k in keep if _fingerprint(k) != before[k]]
        detail = "exit %d; stderr: %s" % (r.returncode, " | ".join(lines[-4:]))
        if r.returncode < 0 or r.returncode >= 128 or any(m in r.stderr for m in SANITIZER_MARKS):
            kind = "crash"
        elif changed:
            kind, detail = "partial", "inputs changed: %s; %s" % (changed, detail)
        elif r.returncode != 0 and left:
            kind, detail = "partial", "left behind: %s; %s" % (left, detail)
        elif r.returncode not in codes or len(err_lines) != 1 or (must_say and must_say not in err_lines[0]):
            kind = "wrong"
            detail = "expected exit %s and one 'kvtrace: error:' line%s; %s" % (
                "/".join(map(str, codes)), " saying %r" % must_say if must_say else "", detail)
        else:
            kind = "clean"
        self._count(what, kind, detail)
        return r

    def _count(self, what, kind, detail):
        self.counts["attempts"] += 1
        self.counts[kind] += 1
        check(kind == "clean", "%s: %s is refused cleanly" % (self.name, what), "%s: %s" % (kind, detail))

    def line(self):
        c = self.counts
        return "# hostile %s: %d attempts, %d clean refusals, %d crashes, %d partial outputs, %d silently wrong" % (
            self.name, c["attempts"], c["clean"], c["crash"], c["partial"], c["wrong"])


def report():
    """One summary line per class (the closing note's table is made from these)."""
    for t in _TALLIES:
        print(t.line())
