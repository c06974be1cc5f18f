# Stripe: HMAC-SHA256 of "timestamp.body" keyed by the whole whsec_… string, hex, in Stripe-Signature
BODY='{"id":"evt_1","type":"invoice.paid"}'
TS=$(date +%s)
SIG=$(printf '%s' "$TS.$BODY" | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1)
curl -sS "$GATEWAY/webhooks/resource-updated/$TOKEN" --data-binary "$BODY" \
  -H "Stripe-Signature: t=$TS,v1=$SIG"
