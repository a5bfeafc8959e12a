"""/metrics compared the Authorization header with `secrets.compare_digest` on str: a header with a non-ASCII
character (an unauthenticated caller's typo, a scanner) raised TypeError, so users saw the endpoint answer 500 (a
logged traceback, an error-rate alert anyone could trigger) instead of refusing with 403. The comparison is now
on bytes; the right token still gets the metrics (the positive control)."""

import pytest


@pytest.mark.django_db
def test_a_non_ascii_bearer_token_is_refused_not_a_server_error(client, settings):
    settings.METRICS_BEARER_TOKEN = "s3cret-token"
    client.raise_request_exception = False
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-tokén")
    assert response.status_code == 403, response.status_code
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token").status_code == 200
