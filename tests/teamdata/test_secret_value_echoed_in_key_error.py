"""A lead who pasted a secret in another common shape — YAML `password: <base64 value>`, whose padding holds the
'=' — saw the value sent back to the browser: the line was split at that '=', the "key" was the value, and the
refusal listed the rejected keys verbatim ("Keys may hold only ...: password: c3VwZXItc2Vj..."), on the page and in
the API's 400 answer. security.md: no page or API answer holds a value, and a form with an error asks for the values
again rather than send them back. The page now names the line, the API the key's position."""

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

VALUE = "c3VwZXItc2VjcmV0LXJlZ2lzdHJ5LXRva2Vu"  # noqa: S105 - what must never be sent back
LINE = f"password: {VALUE}=="


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
    monkeypatch.setattr("teamdata.services.ensure_namespace", lambda team: None)
    monkeypatch.setattr("teamdata.services.resources.apply_secret", lambda manifest: True)


def test_the_secret_page_never_sends_a_pasted_value_back_in_an_error(client, team, lead):
    client.force_login(lead)
    form = {"name": "hf", "kind": "opaque", "values": f"TOKEN=abc\n{LINE}"}
    page = client.post(reverse("teamdata:secret_create", args=[team.slug]), form)
    assert page.status_code == 400  # refused: the key is not a Secret key
    assert VALUE not in page.content.decode()
    assert "Line 2: a key may hold only letters" in page.content.decode()


def test_the_api_never_sends_a_pasted_value_back_in_an_error(team, lead):
    api = APIClient()
    api.force_login(lead)
    values = {"TOKEN": "abc", f"password: {VALUE}": "=="}
    body = {"team": team.slug, "name": "hf", "kind": "opaque", "values": values}
    answer = api.post("/api/v1/secrets/", body, format="json")
    assert answer.status_code == 400
    assert VALUE not in answer.content.decode()
    assert "key 2 (counted from 1)" in answer.json()["values"][0]
