# hmac, as examples/gateway/signed-webhooks.yaml sets it: HMAC-SHA512 of the body, base64, "sha512=" before it
BODY='{"event":"updated"}'
SIG=$(printf '%s' "$BODY" | openssl dgst -sha512 -hmac "$SECRET" -binary | openssl base64 -A)
curl -sS "$GATEWAY/webhooks/resource-updated/$TOKEN" --data-binary "$BODY" \
  -H "X-Signature: sha512=$SIG"
