"""One rule for a tool a test needs and the machine lacks (cvc5, PostgreSQL,
Chromium, node, the `ipc` binary): locally a loud skip, a `SKIPPED: no TOOL`
line on stderr naming the tool; under CI (`CI` set and not `0`/`false`:
.ci/run sets `CI=1`) a failure, because CI never skips. The Rust tests'
rule is the same (tests/common/tools.rs).
"""

import os
import sys

import pytest


def in_ci():
    return os.environ.get("CI") not in (None, "", "0", "false")


def require(tool, present, why):
    """At module level: skip (locally) or fail (CI) the module unless `present`."""
    if present:
        return
    message = f"no {tool} ({why})"
    if in_ci():
        pytest.fail(f"CI is set but there is {message}: tests never skip in CI", pytrace=False)
    # past pytest's capture: this line must be seen
    print(f"SKIPPED: {message}", file=sys.__stderr__)
    pytest.skip(message, allow_module_level=True)
