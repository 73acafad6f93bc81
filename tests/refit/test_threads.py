"""``single_threaded_blas``: one BLAS thread inside (numpy's and scipy's), restored after, reusable."""

from __future__ import annotations

import pytest


def test_blas_is_single_threaded_inside_and_restored_after_every_use() -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import scipy.linalg  # noqa: F401

    from handoffmon.refit.threads import single_threaded_blas

    def blas() -> dict[str, int]:
        return {
            i["filepath"]: i["num_threads"]
            for i in threadpoolctl.threadpool_info()
            if i["user_api"] == "blas"
        }

    before = blas()
    for _ in range(2):  # the cached controller works again after its first use
        with single_threaded_blas():
            inside = blas()
        assert inside.keys() == before.keys() and set(inside.values()) == {1}
        assert blas() == before
