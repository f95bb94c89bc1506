"""Record the golden outputs: ``python tests/golden/record.py`` runs the golden jobs
(tests/golden/golden.py: the jobs and commands in this process, the sweep as one
``python -m pipeline -m`` forked from it, as the test runs them; here the first job creates the
store and the dense job encodes the sample) in a temporary folder and writes
``tests/golden/expected/``.

Only when a change of the numbers is intended (and said in its commit): the test compares
every later change against what this wrote."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

# The golden jobs run in this process (golden.run_all): the checkout's ``pipeline``, not an
# installed one, and tests/commands.py next to it.
_HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(_HERE), str(_HERE.parents[1] / "tests"), str(_HERE.parents[1])]
import golden  # noqa: E402


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        golden.run_all(Path(tmp))
        collected = golden.collect(Path(tmp))
    shutil.rmtree(golden.EXPECTED, ignore_errors=True)
    golden.save(collected)
    print(f"wrote {golden.EXPECTED}: {len(collected['numbers'])} entries, {len(collected['files'])} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
