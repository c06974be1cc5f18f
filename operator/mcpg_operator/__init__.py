"""mcpg operator: reconciles ResourceWatch and WebhookToken into per-namespace gateways."""
