"""Progress when stderr is not a terminal (docs/progress.md): every
long verb (synth, capture, sim, analyze, plot, fidelity, demo) run with stderr
to a file and the test-only interval KVTRACE_PROGRESS_INTERVAL=0 prints plain
progress lines (no carriage return) with its stage, the fraction done and the
time left, reaching 100%; with the default interval (10 s) these short runs
print none; --quiet prints none. TAP.

Under ASan (the build-asan leg, tap.sanitized) demo --short runs once, at interval 0: its run with the
default interval (~15 s there) runs in the normal leg only; it is the same nested verbs' timer that
each verb's own default-interval run checks in both legs."""
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kvrun import KVTRACE  # noqa: E402
from tap import NO_MODEL, check, finish, model_file, sanitized, skip  # noqa: E402

MODEL = model_file()
LINE = re.compile(r"^kvtrace (\w+)(?: ([a-z ]+))?: +(\d+)% \((\d+)/(\d+)\), \d+ (?:s|min) elapsed, "
                  r"about (?:\d+(?:\.\d)? (?:s|min|h)|unknown) left(?: in [a-z ]+, then \d+ more)?$")


def run_logged(tmp, args, interval):
    """Runs kvtrace with stderr to a file (not a terminal); returns (exit status, stderr text)."""
    env = dict(os.environ)
    env.pop("KVTRACE_PROGRESS_INTERVAL", None)
    if interval is not None:
        env["KVTRACE_PROGRESS_INTERVAL"] = interval
    log = os.path.join(tmp, "stderr.log")
    started = time.monotonic()
    with open(log, "w") as err, open(os.devnull, "w") as out:
        rc = subprocess.run([KVTRACE, *args], stdout=out, stderr=err, env=env, cwd=tmp).returncode
    run_logged.seconds = time.monotonic() - started
    with open(log, newline="") as f:
        return rc, f.read()


def progress_lines(text):
    return [m for m in (LINE.match(s) for s in text.split("\n")) if m]


def check_verb(tmp, name, args, verbs, quiet_too=True, default_too=True):
    """name's run prints plain progress lines for each verb in verbs at interval 0, none by default or quiet."""
    rc, text = run_logged(tmp, args + ["--force"], "0")
    lines = progress_lines(text)
    seen = {m.group(1) for m in lines}
    done = {m.group(1) for m in lines if m.group(3) == "100" and m.group(4) == m.group(5)}
    check(rc == 0 and "\r" not in text and set(verbs) <= seen and set(verbs) <= done,
          "%s, stderr to a file, interval 0: plain progress lines of %s reaching 100%%" % (name, ", ".join(verbs)),
          lambda: "exit %d, verbs seen %s, at 100%% %s; stderr:\n%s" % (rc, sorted(seen), sorted(done), text[:600]))
    if default_too:
        rc, text = run_logged(tmp, args + ["--force"], None)
        # a slow machine (sanitizers, a loaded CI box) can take a verb past 10 s: then lines may come, but
        # none before 10 s of that verb's own time
        late = all(int(m.group(0).split("), ")[1].split()[0]) >= 10 for m in progress_lines(text))
        check(rc == 0 and "\r" not in text and (not progress_lines(text) if run_logged.seconds < 9.5 else late),
              "%s: a short run with the default 10 s interval prints no progress (%.1f s)" % (name, run_logged.seconds),
              text[:600])
    else:
        print("# ASan leg: %s with the default interval runs in the normal leg (see the docstring)" % name)
    if quiet_too:
        rc, text = run_logged(tmp, args + ["--force", "--quiet"], "0")
        check(rc == 0 and not progress_lines(text), "%s --quiet: no progress lines" % name, text[:600])


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_verb(tmp, "synth", ["synth", "--like", "stories260k", "--tokens", "300", "-o", "t.h5"], ["synth"])
        check_verb(tmp, "sim", ["sim", "t.h5", "--policies", "streaming,tova", "--budgets", "64", "--chunk", "32",
                                "-o", "res"], ["sim"])
        check_verb(tmp, "analyze", ["analyze", "t.h5", "--results", "res", "-o", "an"], ["analyze"])
        check_verb(tmp, "plot", ["plot", "an", "-o", "figs"], ["plot"])
        rc, text = run_logged(tmp, ["sim", "t.h5", "--policies", "tova", "--budgets", "64", "--chunk", "32",
                                    "-o", "res2"], "0")
        stages = {m.group(2) for m in progress_lines(text)}
        check(rc == 0 and stages == {"layers"}, "sim's lines name their stage (layers)", text[:600])
        if not MODEL:
            for what in ("capture", "fidelity", "demo"):
                skip("%s: progress lines on a file" % what, NO_MODEL)
            return finish()
        check_verb(tmp, "capture", ["capture", "--model", MODEL, "--prompt", "Once upon a time", "--generate", "40",
                                    "--chunk", "4", "-o", "c.h5"], ["capture"])
        rc, text = run_logged(tmp, ["capture", "--model", MODEL, "--prompt", "Once upon a time", "--generate", "40",
                                    "--chunk", "4", "-o", "c.h5", "--force"], "0")
        stages = [m.group(2) for m in progress_lines(text)]
        check(rc == 0 and stages and stages[0] == "prefill" and stages[-1] == "generate",
              "capture's stages: prefill, then generate", text[:600])
        check_verb(tmp, "fidelity", ["fidelity", "--model", MODEL, "--policies", "tova", "--budgets", "32",
                                     "--generate", "80", "-o", "fid"], ["fidelity", "sim"], quiet_too=False)
        check_verb(tmp, "demo --short", ["demo", "--model", MODEL, "--short", "-o", "demo"], ["capture", "sim", "analyze", "plot"],
                   quiet_too=False, default_too=not sanitized(KVTRACE))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
