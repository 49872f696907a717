"""The production worker (`python -m worker`) with a sticky cache of ``--max-cached`` workflows instead of the
SDK's default (1000), so the capacity benchmark can fill the cache with a few hundred sessions and time what a
session costs once it has been evicted. The worker takes no setting for it today (docs/capacity.md); this
launcher changes nothing else, unless asked to leave the collector's settings as Python's.

    python -m bench.capacity.cached_worker --max-cached 100 [--default-gc]
"""

from __future__ import annotations

import argparse
import functools

from temporalio.worker import Worker

import worker.main as worker_main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-cached", type=int, required=True, help="workflows the worker keeps in its sticky cache")
    parser.add_argument("--default-gc", action="store_true",
                        help="keep Python's collector settings (the worker's tune_gc freezes start-up and collects less often)")
    args = parser.parse_args()
    if args.default_gc:
        setattr(worker_main, "tune_gc", lambda: None)
    # worker.main builds its Worker objects through this module-level name.
    setattr(worker_main, "Worker", functools.partial(Worker, max_cached_workflows=args.max_cached))
    worker_main.main()


if __name__ == "__main__":
    main()
