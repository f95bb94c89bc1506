"""``figures_off()``: for a block of a test that checks what a sweep or a comparison computes and
says, not its figures, matplotlib's ``Figure.savefig`` renders nothing and leaves an empty file
where the PNG would be (so what lists, uploads or links the files goes on as before).

Rendering the PNGs is most of a small sweep's summary (a sweep over 4 scoring settings: a
quarter of its time, the comparison reports' forest and per-query figures). The figures are
checked where they are the claim: tests/pipeline/test_plots.py, the golden test, the sweep
report's ``forest.png`` (tests/pipeline/test_sweep_report.py), ``main_effects.png``
(tests/pipeline/test_compare.py), ``budget_curve.png`` (tests/pipeline/test_sweep_ties.py).
This is the sweeps' counterpart of ``commands.job_in_process(figures=False)``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterator


@contextlib.contextmanager
def figures_off(keep: tuple[str, ...] = ()) -> Iterator[None]:
    """``Figure.savefig`` writes an empty file instead of the image during the block, except
    for the files named in ``keep`` (the figures the test checks: drawn as ever). A figure
    saved into an open file (a job's ``plots/``, through ``atomic_open``) leaves it empty."""
    from matplotlib.figure import Figure

    real = Figure.savefig

    def savefig(self: Any, fname: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(fname, (str, os.PathLike)):
            if Path(fname).name in keep:
                return real(self, fname, *args, **kwargs)
            Path(fname).touch()
        return None

    Figure.savefig = savefig  # type: ignore[method-assign]
    try:
        yield
    finally:
        Figure.savefig = real  # type: ignore[method-assign]
