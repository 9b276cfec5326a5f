#!/usr/bin/python3
"""Runs rdma-core's pyverbs test suite, one module per call.

  pyverbs_suite.py prepare SRC DEST   copy the suite (Debian ships it gzipped)
                                      into DEST/tests, uncompressed; print the
                                      test module names, one a line
  pyverbs_suite.py run DEST MODULE    run tests/MODULE.py with unittest and
                                      print one line per test: its outcome

The Rust harness (pyverbs_suite.rs) calls `run` once per module, each in its
own process with a timeout, through the drop-in libibverbs.so.1.
"""

import gzip
import os
import shutil
import sys
import time
import unittest

MARKER = "PYVERBS-SUITE-RESULT "


def prepare(src, dest):
    out = os.path.join(dest, "tests")
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    for fn in sorted(os.listdir(src)):
        path = os.path.join(src, fn)
        if fn.endswith(".py.gz"):
            with gzip.open(path, "rb") as f, open(os.path.join(out, fn[:-3]), "wb") as o:
                o.write(f.read())
        elif fn.endswith(".py"):
            shutil.copy(path, os.path.join(out, fn))
    for fn in sorted(os.listdir(out)):
        if fn.startswith("test_") and fn.endswith(".py"):
            print(fn[:-3])


class Collect(unittest.TextTestResult):
    """Keeps every test's outcome, with the reason or the traceback."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.outcomes = []

    def _add(self, test, outcome, detail=""):
        self.outcomes.append({"id": test.id(), "outcome": outcome, "detail": detail})

    def addSuccess(self, test):
        super().addSuccess(test)
        self._add(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._add(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._add(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._add(test, "skipped", str(reason))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._add(test, "passed", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._add(test, "failed", "unexpected success")


def run(dest, module):
    sys.path.insert(0, dest)
    sys.path.insert(0, os.path.join(dest, "tests"))
    # The suite's own entry point (run_tests.py) parses its arguments before
    # any test is built; tests.utils first, then the package's modules.
    import tests.utils  # noqa: F401
    from args_parser import parser

    sys.argv = [sys.argv[0]]
    parser.parse_args()
    mod = __import__("tests." + module, fromlist=["*"])
    suite = unittest.defaultTestLoader.loadTestsFromModule(mod)
    start = time.monotonic()
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=Collect)
    result = runner.run(suite)
    # One line per test: marker, outcome, id, detail (newlines escaped).
    for o in result.outcomes:
        detail = o["detail"].replace("\\", "\\\\").replace("\n", "\\n").replace("\t", " ")
        print(f'{MARKER}{o["outcome"]}\t{o["id"]}\t{detail}')
    print(f"{MARKER}done\t{module}\t{time.monotonic() - start:.3f}s", flush=True)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "prepare":
        prepare(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
