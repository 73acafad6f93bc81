"""``telemetry.otel`` on an install without the OpenTelemetry SDK (the ``otel`` extra) fails at
build time naming the extra and the key, instead of exporting into the API's no-op providers."""

from __future__ import annotations

from tests.core.test_packaging import _run_core_only


def test_telemetry_otel_without_the_sdk_names_the_extra() -> None:
    out = _run_core_only(
        """
        from handoffmon.config import config_from_mapping
        from handoffmon.errors import MissingExtraError
        from handoffmon.exporters import build_exporters

        try:
            build_exporters(config_from_mapping({"telemetry": {"otel": True}}))
        except MissingExtraError as exc:
            print("ERROR", exc)
        else:
            print("BUILT")
        # Prometheus alone needs no extra
        print(sorted(type(e).__name__ for e in build_exporters(config_from_mapping({}))))
        """
    )
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert first.startswith("ERROR "), out.stdout
    assert "telemetry.otel" in first and "pip install 'handoffmon[otel]'" in first, first
    assert second == "['PrometheusExporter', 'StructlogExporter']"


def test_runtime_with_telemetry_otel_without_the_sdk_fails_fast() -> None:
    """``build_runtime`` (what ``wrap``, the LiteLLM callback and ``serve`` build) raises the
    same error before any thread starts, rather than monitoring without OTel output."""
    out = _run_core_only(
        """
        from handoffmon.config import config_from_mapping
        from handoffmon.errors import MissingExtraError
        from handoffmon.runtime import build_runtime

        try:
            config = {"telemetry": {"otel": True}, "refit": {"interval_s": 0}}
            build_runtime(config_from_mapping(config), registry=None)
        except MissingExtraError as exc:
            print("ERROR", exc)
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ERROR ") and "handoffmon[otel]" in out.stdout, out.stdout
