"""``python -m tests.benchmarks.fuzz_serve [--examples N] [--seed S]``: the serve fuzz suite, long.

Runs ``tests/proxy/test_fuzz.py`` (generated requests, headers, SSE streams and replies,
direct vs through ``serve``) with ``N`` examples per property (default 2,000; the default
test run uses 25) and hypothesis' randomized search; exits non-zero on the first mismatch,
printing the shrunk example. Not a benchmark: it lives here because it is long.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--examples", type=int, default=2000, help="examples per property")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (reproduce a run)")
    args = parser.parse_args(argv)
    os.environ["HANDOFFMON_FUZZ_EXAMPLES"] = str(args.examples)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import pytest

    opts = ["-q", "-x", "-p", "no:logging", "tests/proxy/test_fuzz.py"]
    if args.seed is not None:
        opts.append(f"--hypothesis-seed={args.seed}")
    return int(pytest.main(opts))


if __name__ == "__main__":
    sys.exit(main())
