"""The Python package (bindings/python, docs/python.md), TAP, in two parts:

1. its own tests (pytest, bindings/python/tests), run in this process on the package's source tree: one TAP
   line per test, a skipped test a "# SKIP" line (counted as skipped by tests/run_all.sh, never as passed);
2. the install a user does: a fresh virtual environment, `pip install ./bindings/python[record]` (the test
   venv's pins as constraints, so that pip takes the CPU torch the venv has and nothing unpinned), then
   `import kvtrace` reports the trace schema, and the example (bindings/python/examples/record_and_replay.py)
   records a trace from a transformers model, replays it with `kvtrace sim` and reads the results back
   with `kvtrace.load_results`, as the README says; and `pip wheel` (what `make wheel` runs) builds one
   pure-Python wheel.

Run by tests/run_all.sh with the test venv's Python; KVTRACE and KVTRACE_SMOLLM2 set."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PKG = os.path.join(ROOT, "bindings", "python")
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from tap import check, finish  # noqa: E402


class TapReport:
    """A pytest plugin: one TAP line per test, from its call phase (or its setup when that failed or
    skipped), so that run_all.sh's counts hold pytest's."""

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and not report.passed):
            if report.skipped:
                reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
                print("ok - %s # SKIP %s" % (report.nodeid, reason.replace("Skipped: ", "")))
                sys.stdout.flush()
            else:
                check(report.passed, "pytest %s" % report.nodeid, report.longreprtext[-3000:])
        elif report.when == "teardown" and report.failed:
            check(False, "pytest %s (teardown)" % report.nodeid, report.longreprtext[-3000:])

    def pytest_collectreport(self, report):
        if report.failed:
            check(False, "pytest collects %s" % report.nodeid, report.longreprtext[-3000:])


def pytest_part():
    import pytest
    sys.path.insert(0, os.path.join(PKG, "src"))
    # no terminal reporter: this plugin's TAP lines are the whole output
    rc = pytest.main(["-p", "no:cacheprovider", "-p", "no:terminal", os.path.join(PKG, "tests")],
                     plugins=[TapReport()])
    check(rc in (0, 1), "pytest ran the package's tests (exit status %d: 0 all passed, 1 some failed)" % rc)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, **kw)


def version(py, cwd):
    return run([py, "-c", "import kvtrace; print(kvtrace.__version__)"], cwd=cwd).stdout.strip()


def install_part():
    with tempfile.TemporaryDirectory() as tmp:
        venv = os.path.join(tmp, "venv")
        r = run([sys.executable, "-m", "venv", venv])
        if not check(r.returncode == 0, "a fresh virtual environment", r.stderr):
            return
        py = os.path.join(venv, "bin", "python")
        r = run([py, "-m", "pip", "install", "--disable-pip-version-check", "-q", "-c",
                 os.path.join(ROOT, "tests", "requirements.txt"), PKG + "[record]"])
        if not check(r.returncode == 0, "pip install ./bindings/python[record] into it", r.stderr[-2000:]):
            return
        # the import from the installed copy, not the source tree: run it outside the repository
        r = run([py, "-c", "import kvtrace, sys; print(kvtrace.__version__, kvtrace.TRACE_SCHEMA, kvtrace.__file__)"],
                cwd=tmp)
        print("# installed: %s" % r.stdout.strip())
        check(r.returncode == 0 and "site-packages" in r.stdout and "(1, 0)" in r.stdout,
              "import kvtrace in the fresh venv: the installed package, trace schema (1, 0)", r.stderr + r.stdout)
        dist = os.path.join(tmp, "dist")   # what make wheel runs
        r = run([py, "-m", "pip", "wheel", "--disable-pip-version-check", "-q", "--no-deps", "-w", dist, PKG])
        wheels = os.listdir(dist) if os.path.isdir(dist) else []
        check(r.returncode == 0 and wheels == ["kvtrace-%s-py3-none-any.whl" % version(py, tmp)],
              "pip wheel ./bindings/python (make wheel): one pure-Python wheel of the package's version",
              r.stderr[-2000:] + " %s" % wheels)
        out = os.path.join(tmp, "example")
        r = run([py, os.path.join(PKG, "examples", "record_and_replay.py"), "--kvtrace", os.environ["KVTRACE"],
                 "-o", out], cwd=tmp)
        print("# example's output:\n#   " + (r.stdout + r.stderr).strip().replace("\n", "\n#   "))
        check(r.returncode == 0 and os.path.isfile(os.path.join(out, "trace.h5"))
              and os.path.isfile(os.path.join(out, "results", "summary.csv")),
              "the example in the fresh venv: records a trace from transformers, kvtrace sim replays it, "
              "load_results reads it", r.stderr[-2000:])


if __name__ == "__main__":
    pytest_part()
    install_part()
    finish()
