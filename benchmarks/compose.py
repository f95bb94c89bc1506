"""CPU time of Hydra composing one sweep job of ``conf/``, in-process (issue 35).

    python benchmarks/compose.py [--rounds 4]

Composes the 20 jobs of ``-m k=1,3,5,10,20 reorder=none,reverse,lost_in_the_middle,attention_optimal``
as a sweep's launcher does (``load_sweep_config``), in rounds, and prints the best round's CPU
time a job (CPU, not wall: the number holds on a busy machine). Rounds alternate between
the config cache warm (``hydra_plugins/pipeline_config_cache``: each file parsed once) and
emptied before every composition (each file parsed as Hydra's own source parses it, plus
the cache's copy). At a commit without the plugin both rows are Hydra's own.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOBS = [[f"k={k}", f"reorder={r}"] for k in (1, 3, 5, 10, 20)
        for r in ("none", "reverse", "lost_in_the_middle", "attention_optimal")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    import pipeline.config  # noqa: F401  (the base_config schema)
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", [], RunMode.MULTIRUN)
        cache = sys.modules.get("hydra_plugins.pipeline_config_cache.config_cache")
        best = {"cached": float("inf"), "parsed every time": float("inf")}
        for i in range(2 * args.rounds):
            mode = "cached" if i % 2 else "parsed every time"
            t0 = time.process_time()
            for job in JOBS:
                if cache is not None and mode != "cached":
                    cache.clear()
                loader.load_sweep_config(master, job)
            best[mode] = min(best[mode], (time.process_time() - t0) / len(JOBS))
    for mode, seconds in best.items():
        print(f"{mode}: {seconds * 1000:.1f} ms CPU a composition (best of {args.rounds} rounds of {len(JOBS)})")
    print("config cache:", "on" if cache is not None else "not installed (Hydra's own sources)")


if __name__ == "__main__":
    main()
