"""Record the golden outputs: ``python tests/golden/record.py`` runs the golden jobs
(tests/golden/golden.py) in a temporary folder and writes ``tests/golden/expected/``.

Only when a change of the numbers is intended (and said in its commit): the test compares
every later change against what this wrote."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
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
