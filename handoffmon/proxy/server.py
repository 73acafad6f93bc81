"""Run the proxy on uvicorn: one worker, SIGTERM/SIGINT drain in-flight requests and the check queue."""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

from handoffmon._extras import requires_extra
from handoffmon.config import HandoffmonConfig

_log = logging.getLogger("handoffmon.proxy")


def uvicorn_options(config: HandoffmonConfig) -> dict[str, Any]:
    """``uvicorn.Config`` keyword arguments for the proxy, apart from the app and address.

    The upstream's own ``date``/``server`` headers are forwarded, so uvicorn must not add
    its own. Graceful shutdown: on SIGTERM uvicorn stops accepting, lets in-flight
    requests finish (up to ``pipeline.shutdown_timeout_s``), then the lifespan drains the
    monitor's check queue.
    """
    return {
        "lifespan": "on",
        "access_log": False,
        "server_header": False,
        "date_header": False,
        "timeout_graceful_shutdown": max(1, int(config.pipeline.shutdown_timeout_s)),
        "timeout_keep_alive": 75,
    }


def serve(config: HandoffmonConfig, *, log_level: str = "warning") -> None:
    """Serve ``create_app(config)`` until SIGTERM/SIGINT; returns after the monitor drained."""
    with requires_extra("proxy", "handoffmon serve"):
        import uvicorn

    from handoffmon.proxy.app import create_app

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    app = create_app(config)
    # Startup objects (modules, config, compiled rules) live as long as the process: move them
    # out of the collector's reach so full collections, which pause the event loop, stay short.
    gc.collect()
    gc.freeze()
    cfg = uvicorn.Config(
        app, host=config.proxy.host, port=config.proxy.port, log_level=log_level, **uvicorn_options(config)
    )
    _log.info("handoffmon serve on %s:%d -> %s", config.proxy.host, config.proxy.port, config.proxy.upstream)
    uvicorn.Server(cfg).run()
