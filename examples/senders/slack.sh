# Slack: HMAC-SHA256 of "v0:timestamp:body" keyed by the signing secret, hex, as "v0=<sig>"
BODY='token=x&team_id=T1&command=%2Freport'
TS=$(date +%s)
SIG=$(printf '%s' "v0:$TS:$BODY" | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1)
curl -sS "$GATEWAY/webhooks/resource-updated/$TOKEN" --data-binary "$BODY" \
  -H "X-Slack-Request-Timestamp: $TS" -H "X-Slack-Signature: v0=$SIG"
