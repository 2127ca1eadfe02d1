"""Run unittest test ids (module.Class.test) in the current directory and write each test
case's outcome as JSON: `python unittest_json.py OUT.json ID [ID ...]`.

Triton's qa tests subclass TestResultCollector, which needs unittest's own result object
(pytest's breaks it), so they run under unittest; a test with failing subtests fails once.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import unittest
from typing import Any


def _reason(error: tuple[type[BaseException], BaseException, Any]) -> str:
    kind, value, _ = error
    text = str(value).strip().splitlines()
    first = text[0] if text else ""
    detail = " | ".join(line.strip() for line in text[1:3] if line.strip())
    return f"{kind.__name__}: {first}" + (f" | {detail}" if detail else "")


class JsonResult(unittest.TextTestResult):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outcomes: dict[str, dict[str, str]] = {}

    def _set(self, test: unittest.TestCase, status: str, reason: str = "") -> None:
        key = test.id()
        if self.outcomes.get(key, {}).get("status") in ("failed", "error"):
            return  # a failed subtest keeps the case failed
        self.outcomes[key] = {"status": status, "reason": reason[:500]}

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self.outcomes.setdefault(test.id(), {"status": "passed", "reason": ""})

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._set(test, "failed", _reason(err))

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        self._set(test, "error", _reason(err))

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self._set(test, "skipped", reason)

    def addSubTest(self, test: unittest.TestCase, subtest: Any, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            status = "failed" if issubclass(err[0], test.failureException) else "error"
            self._set(test, status, f"{subtest._subDescription()} {_reason(err)}")


def _tests(suite: unittest.TestSuite | unittest.TestCase) -> list[unittest.TestCase]:
    if isinstance(suite, unittest.TestCase):
        return [suite]
    return [test for member in suite for test in _tests(member)]


def _skip(suite: unittest.TestSuite, skips: dict[str, str]) -> None:
    """Test ids in `skips` (env TRITON_SUITES_SKIP, JSON id -> reason) are skipped."""
    for test in _tests(suite):
        if test.id() in skips:
            skipped = unittest.skip(skips[test.id()])(lambda: None)
            setattr(test, test._testMethodName, skipped)


def main() -> int:
    out, ids = sys.argv[1], sys.argv[2:]
    skips = json.loads(os.environ.get("TRITON_SUITES_SKIP", "{}"))
    sys.path.insert(0, ".")
    outcomes: dict[str, dict[str, str]] = {}
    for test_id in ids:
        try:
            suite = unittest.defaultTestLoader.loadTestsFromName(test_id)
        except Exception:  # an import error is this test id's outcome
            reason = traceback.format_exc().strip().splitlines()[-1]
            outcomes[test_id] = {"status": "error", "reason": reason}
            continue
        _skip(suite, skips)
        runner = unittest.TextTestRunner(resultclass=JsonResult, verbosity=2, stream=sys.stdout)
        result = runner.run(suite)
        assert isinstance(result, JsonResult)
        outcomes.update(result.outcomes)
    with open(out, "w") as file:
        json.dump(outcomes, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
