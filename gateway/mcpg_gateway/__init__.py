"""mcpg gateway: serves MCP resource subscriptions and runs the watches behind them."""
