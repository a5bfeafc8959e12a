"""A junk `?pool=` value on the pending page, a NUL byte too, is a 404, never a server error: the slug went straight
to the database lookup, whose driver refuses a string with NUL (ValueError, 500)."""

import pytest

from tests.factories import PoolFactory


@pytest.mark.parametrize("value", ["\x00", "train\x00"])
def test_a_nul_byte_in_the_pending_pool_filter_is_not_a_server_error(client, researcher, value):
    PoolFactory(slug="train", name="Train Pool")
    client.force_login(researcher)
    client.raise_request_exception = False
    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        response = client.get("/jobs/pending/", {"pool": value}, **headers)
        assert response.status_code < 500, (value, headers, response.status_code)
        assert response.status_code == 404, (value, headers, response.status_code)


def test_a_pool_slug_still_filters_the_pending_page(client, researcher):
    PoolFactory(slug="train", name="Train Pool")
    client.force_login(researcher)
    assert client.get("/jobs/pending/", {"pool": "train"}).status_code == 200
    assert client.get("/jobs/pending/", {"pool": "nope"}).status_code == 404
