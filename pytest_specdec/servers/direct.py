"""`urlopen`: urllib without the environment's proxies, for the plugin's own checks of a server.

urllib sends every request through `HTTP_PROXY`/`http_proxy` unless `NO_PROXY` names the host,
127.0.0.1 included, while aiohttp (the workloads' client) ignores proxies: on a machine with a
proxy set, a launched server's readiness polls and an attached one's `/server_info` read went to
the proxy and came back as its 502, read as "still warming up" or "not running". Every request of
a run goes straight to the server, so the checks see the server the workloads measure.
"""

from __future__ import annotations

import os
import urllib.request
from typing import Any

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

#: The variables urllib and aiohttp (with trust_env) read a proxy from.
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def urlopen(url: str | urllib.request.Request, timeout: float) -> Any:
    """`urllib.request.urlopen`, never through a proxy."""
    return _OPENER.open(url, timeout=timeout)


def proxy_note() -> str:
    """'' where no proxy is set, else a clause saying the run ignores it (for unreachable-server messages)."""
    names = [name for name in PROXY_VARIABLES
             if os.environ.get(name) or os.environ.get(name.lower())]
    if not names:
        return ""
    return (f" (the run connects to the server directly, ignoring {', '.join(names)}: "
            f"a server reachable only through that proxy cannot be measured without it)")
