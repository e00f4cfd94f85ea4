"""MCP client: the operator's ``mcp.json`` servers, their tools as ``mcp__<server>__<tool>``.

* `config` - ``mcp.json`` parsed and checked (`McpConfigError`).
* `secrets` - ``{{secret:NAME}}`` in ``env``/``headers`` from the vault's global entries.
* `launch` - a stdio server inside the bubblewrap sandbox; a streamable-HTTP endpoint.
* `server` - one server's supervised loop: connect, list, serve calls, restart with backoff.
* `tool` - `McpTool`: a server's tool in the registry (approval, result rendering).
* `service` - `McpService`: every server of the file, their state for status and doctor.

See docs/mcp.md.
"""
