{
  description = "ferrex — local-first long-term memory MCP server for AI agents";

  inputs = {
    nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";
    flake-utils.url = "github:numtide/flake-utils";
  };

  # Not built in ferrex's CI (no Nix there): kept conventional on purpose. See docs/modes.md.
  outputs = { self, nixpkgs, flake-utils }:
    flake-utils.lib.eachDefaultSystem (system:
      let
        pkgs = import nixpkgs { inherit system; };
        python = pkgs.python311;
        # Qdrant from nixpkgs: ferrex finds it through FERREX_QDRANT_BIN and runs it as its
        # managed sidecar (bound to 127.0.0.1, with a generated API key).
        qdrant = pkgs.qdrant;
        # The ONNX runtime wheels expect these at run time.
        runtimeLibs = pkgs.lib.makeLibraryPath [ pkgs.stdenv.cc.cc.lib pkgs.zlib ];

        # qdrant-edge-py, fastembed and mcp 2.x are not all in nixpkgs yet, so the Python side
        # installs from PyPI wheels into a virtualenv on first run (the source is this flake);
        # Python itself and Qdrant come from nixpkgs.
        ferrex = pkgs.writeShellApplication {
          name = "ferrex";
          runtimeInputs = [ python qdrant ];
          text = ''
            venv="''${XDG_CACHE_HOME:-$HOME/.cache}/ferrex-venv-${builtins.substring 0 12 (self.narHash or "dev")}"
            if [ ! -x "$venv/bin/ferrex" ]; then
              ${python}/bin/python -m venv "$venv"
              "$venv/bin/pip" install --quiet '${self}[offline]'
            fi
            export LD_LIBRARY_PATH="${runtimeLibs}''${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            export FERREX_QDRANT_BIN="''${FERREX_QDRANT_BIN:-${qdrant}/bin/qdrant}"
            exec "$venv/bin/ferrex" "$@"
          '';
        };
      in
      {
        packages.default = ferrex;
        packages.ferrex = ferrex;

        # `nix run .` starts the MCP server on stdio in sidecar mode (a new store's vectors
        # go to the managed Qdrant); `nix run . -- serve --http 127.0.0.1:8765` is the team
        # server.
        apps.default = {
          type = "app";
          program = "${ferrex}/bin/ferrex";
        };

        # Python, a virtualenv created on entry, and qdrant on PATH (so the sidecar tests run
        # against the real binary instead of only the stand-in).
        devShells.default = pkgs.mkShell {
          packages = [ python python.pkgs.pip python.pkgs.virtualenv pkgs.sqlite pkgs.ruff qdrant ];
          LD_LIBRARY_PATH = runtimeLibs;
          shellHook = ''
            if [ ! -d .venv ]; then
              ${python}/bin/python -m venv .venv
              .venv/bin/pip install -e '.[test,offline,dev]'
            fi
            . .venv/bin/activate
          '';
        };
      });
}
