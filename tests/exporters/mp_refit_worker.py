"""Child process for the multiprocess refit test: a runtime drives conversations with a handoff
(a -> b) and without (b -> b) into PROMETHEUS_MULTIPROC_DIR and, with ``refit``, refits once.

Usage: python -m tests.exporters.mp_refit_worker N_EACH [refit]
"""

from __future__ import annotations

import os
import sys

from tests.pipeline.helpers import make_config, run_conversation, runtime


def main(argv: list[str]) -> None:
    """``N_EACH`` conversations of each kind; then one refit when asked."""
    assert "PROMETHEUS_MULTIPROC_DIR" in os.environ
    config = make_config(refit={"interval_s": 3600, "min_n": 1})
    with runtime(config) as rt:
        for i in range(int(argv[0])):
            run_conversation(rt.monitor, ["a", "b"], user=f"handoff {os.getpid()} {i}")
            run_conversation(rt.monitor, ["b", "b"], user=f"stay {os.getpid()} {i}")
        assert rt.flush(30)
        if argv[1:] == ["refit"]:
            assert rt.refit_now() is not None


if __name__ == "__main__":
    main(sys.argv[1:])
