{
  description = "ferrex — local-first long-term memory MCP server for AI agents";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";
    flake-utils.url = "github:numtide/flake-utils";
  };

  outputs = { self, nixpkgs, flake-utils }:
    flake-utils.lib.eachDefaultSystem (system:
      let
        pkgs = import nixpkgs { inherit system; };
        python = pkgs.python311;
      in
      {
        # First version: a development shell with Python, a virtualenv created on entry and
        # the runtime libraries the ONNX wheels expect. The package itself installs from PyPI
        # wheels (qdrant-edge-py, fastembed and onnxruntime are not all in nixpkgs yet).
        devShells.default = pkgs.mkShell {
          packages = [ python python.pkgs.pip python.pkgs.virtualenv pkgs.sqlite pkgs.ruff ];
          LD_LIBRARY_PATH = pkgs.lib.makeLibraryPath [ pkgs.stdenv.cc.cc.lib pkgs.zlib ];
          shellHook = ''
            if [ ! -d .venv ]; then
              ${python}/bin/python -m venv .venv
              .venv/bin/pip install -e '.[test,offline]'
            fi
            . .venv/bin/activate
          '';
        };

        # `nix run .` starts the server from a virtualenv in the data dir's sibling cache.
        apps.default = {
          type = "app";
          program = toString (pkgs.writeShellScript "ferrex" ''
            set -euo pipefail
            venv="''${XDG_CACHE_HOME:-$HOME/.cache}/ferrex-venv"
            if [ ! -x "$venv/bin/ferrex" ]; then
              ${python}/bin/python -m venv "$venv"
              "$venv/bin/pip" install --quiet '${self}[offline]'
            fi
            export LD_LIBRARY_PATH=${pkgs.lib.makeLibraryPath [ pkgs.stdenv.cc.cc.lib pkgs.zlib ]}
            exec "$venv/bin/ferrex" "$@"
          '');
        };
      });
}
