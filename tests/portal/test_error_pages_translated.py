"""A 404 (the answer PRODUCT.md gives for anything outside a user's scope), a 403 and a 500 are the portal's own pages,
in the reader's language, with a way back (templates/404.html, 403.html, 500.html): they were Django's bare English
pages ("Not Found — The requested resource was not found on this server."). docs/translations.md: "Every message is
translated"."""

import pytest

from tests.factories import JobFactory, PoolFactory


@pytest.fixture
def chinese_reader(researcher, compiled_translations):
    researcher.language = "zh-hans"
    researcher.save(update_fields=["language"])
    return researcher


def test_a_404_is_in_the_readers_language_and_inside_the_portal(client, chinese_reader):
    client.force_login(chinese_reader)
    response = client.get("/jobs/999999/")
    html = response.content.decode()
    assert response.status_code == 404
    assert "The requested resource was not found on this server." not in html
    assert 'lang="zh-hans"' in html
    assert "页面不存在" in html and "返回门户" in html


def test_a_403_is_in_the_readers_language_and_inside_the_portal(client, chinese_reader, lead, team):
    # Only a job's submitter chooses its e-mails: anyone else who may see the job gets a 403.
    job = JobFactory(team=team, pool=PoolFactory(slug="train"), submitted_by=lead)
    client.force_login(chinese_reader)
    response = client.post(f"/jobs/{job.pk}/notify/", {"notify": ["fail"]})
    html = response.content.decode()
    assert response.status_code == 403
    assert "403 Forbidden" not in html
    assert 'lang="zh-hans"' in html
    assert "不允许" in html and 'href="/"' in html


def test_the_500_page_renders_without_a_request_context_or_the_database():
    from django.template.loader import get_template
    from django.utils import translation

    with translation.override("zh-hans"):
        html = get_template("500.html").render({})
    assert "出错了" in html and 'lang="zh-hans"' in html
