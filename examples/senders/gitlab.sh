# GitLab: the secret itself in X-Gitlab-Token (nothing is signed: keep it to TLS)
BODY='{"object_kind":"push"}'
curl -sS "$GATEWAY/webhooks/resource-updated/$TOKEN" --data-binary "$BODY" \
  -H "X-Gitlab-Token: $SECRET"
