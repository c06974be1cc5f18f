# GitHub: HMAC-SHA256 of the body keyed by the secret, hex, in X-Hub-Signature-256
BODY='{"action":"synchronize"}'
SIG=$(printf '%s' "$BODY" | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1)
curl -sS "$GATEWAY/webhooks/resource-updated/$TOKEN" --data-binary "$BODY" \
  -H "X-Hub-Signature-256: sha256=$SIG"
