# Standard Webhooks: HMAC-SHA256 of "id.timestamp.body" keyed by the base64 after whsec_, sent base64 as "v1,<sig>"
BODY='{"type":"report.updated"}'
ID="msg_$(openssl rand -hex 12)"
TS=$(date +%s)
KEY=$(printf '%s' "${SECRET#whsec_}" | openssl base64 -d -A | od -An -tx1 | tr -d ' \n')
SIG=$(printf '%s' "$ID.$TS.$BODY" | openssl dgst -sha256 -mac HMAC -macopt "hexkey:$KEY" -binary | openssl base64 -A)
curl -sS "$GATEWAY/webhooks/resource-updated/$TOKEN" --data-binary "$BODY" \
  -H "webhook-id: $ID" -H "webhook-timestamp: $TS" -H "webhook-signature: v1,$SIG"
