"""Whether a host and port can be listened on, asked before a command spends seconds starting up."""

from __future__ import annotations

import socket


def cannot_listen(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound now (``"address already in use"``), or ``None``.

    Binds every address ``host`` resolves to as asyncio's server does (``SO_REUSEADDR``, IPv6
    sockets v6-only), then closes them: a port bound in between is still reported by the server.
    Port 0 (any free port) always can.
    """
    if port == 0:
        return None
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, addr in dict.fromkeys(infos):
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(addr)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return reason[:1].lower() + reason[1:]
    return None
