"""The contract between the operator and the gateway: what a configuration is, and whether a gateway accepts it.

`config` (the pydantic model), `loading` (YAML, environment, schema), `cel` (read policies and notification
filters, compiled and type-checked), `check` (the whole question, asked by both programs), `documents`, `templates`,
`uris`, `backend_urls` (a backend URL's shape), `pointers`, `errors`, `digests` (of a document, its entries and
its restart-only fields) and `acknowledgement` (what a gateway says it serves) and `signing` (a signed webhook's
block) (the gateway's module map says what each holds), and `command_line` (the three programs' exit statuses,
one-line usage errors, --version).
It depends on pydantic, PyYAML and the CEL runtime only, never on a server-side layer (the MCP SDK, an HTTP
server or client, a database or NATS client, metrics), so the operator image can import it: `make lint`
holds both programs to that with import-linter.
"""
