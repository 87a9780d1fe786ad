"""The ``ferrex`` subcommands beyond serving MCP: models, client setup and the human CLI."""
