#!/bin/sh
# As the upstream image's entrypoint: arguments that start with a dash are nats-server's.
set -e
if [ "${1#-}" != "$1" ]; then
  set -- nats-server "$@"
fi
exec "$@"
