"""A STAND-IN for the ``qdrant`` server binary, for the sidecar lifecycle tests only.

No Qdrant binary can be installed here, so the tests run ferrex's sidecar manager against this
small program. It is not Qdrant and stores nothing: it honours Qdrant's ``--config-path`` (the
YAML ferrex writes: ``service.host``, ``service.http_port``, ``service.api_key``,
``storage.storage_path``) and serves what the lifecycle needs over HTTP:

- ``/healthz``, ``/livez``, ``/readyz``: 200 (no key needed, as in Qdrant); ``/readyz`` is 503
  until ``STANDIN_READY_DELAY`` seconds have passed;
- ``/collections``: 200 with the configured ``api-key`` header, 401 without or with another.

It records each start in ``<storage_path>/standin-starts`` and exits 0 on SIGTERM, unless
``STANDIN_IGNORE_SIGTERM=1`` (then only SIGKILL stops it). ``STANDIN_EXIT_AT_START=N`` makes it
exit with status N at once. The data path is tested against qdrant-client elsewhere.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml


def main(argv: list[str]) -> int:
    if "--config-path" not in argv:
        sys.stderr.write("stand-in: --config-path is required\n")
        return 64
    config_path = Path(argv[argv.index("--config-path") + 1])
    config: dict[str, Any] = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    exit_status = os.environ.get("STANDIN_EXIT_AT_START")
    if exit_status:
        sys.stderr.write("stand-in: exiting at start as asked\n")
        return int(exit_status)
    service = config["service"]
    storage = Path(config["storage"]["storage_path"])
    storage.mkdir(parents=True, exist_ok=True)
    with open(storage / "standin-starts", "a", encoding="utf-8") as starts:
        starts.write(f"{os.getpid()}\n")
    api_key = service.get("api_key")
    ready_at = time.monotonic() + float(os.environ.get("STANDIN_READY_DELAY", "0"))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path in ("/healthz", "/livez"):
                self._answer(200, {"title": "stand-in health check passed"})
            elif self.path == "/readyz":
                ready = time.monotonic() >= ready_at
                self._answer(200 if ready else 503, {"ready": ready})
            elif self.path == "/collections":
                if api_key and self.headers.get("api-key") != api_key:
                    self._answer(401, {"status": {"error": "Must provide an API key"}})
                else:
                    self._answer(200, {"result": {"collections": []}, "status": "ok"})
            else:
                self._answer(404, {"status": {"error": "not served by the stand-in"}})

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer((service["host"], int(service["http_port"])), Handler)
    if os.environ.get("STANDIN_IGNORE_SIGTERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.stderr.write(f"stand-in qdrant listening on {service['host']}:{service['http_port']}\n")
    sys.stderr.flush()
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
