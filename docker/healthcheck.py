"""Container health: exit 0 when the SGLang server in this container answers /health with 200.

SGLang 0.5.17 answers 503 while it starts (weights, CUDA graphs) and 200 once it serves
(sglang/srt/entrypoints/http_server.py). The port is the server's --port:
SPECGATE_HEALTH_PORT, default SGLang's 30000.
"""

from __future__ import annotations

import os
import sys
import urllib.request


def main() -> int:
    url = f"http://127.0.0.1:{os.environ.get('SPECGATE_HEALTH_PORT', '30000')}/health"
    # No proxies: clusters often set HTTP_PROXY for the whole container, and a loopback
    # probe sent through a proxy reports the proxy's health, not the server's.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=5) as response:
            status = response.status
    except OSError as e:  # refused, timed out, or an HTTP error status such as 503
        print(f"{url}: {e}")
        return 1
    print(f"{url}: {status}")
    return 0 if status == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
