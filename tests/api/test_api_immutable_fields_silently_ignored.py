"""A PUT or PATCH that names a field the resource never changes (the person or team of a membership, the team or pool
of a quota, the GPUs, start, price or lending of a reservation) with another value is refused with a field error, as a
job's PATCH is ("Only notify can be changed on a job."). Users saw the field dropped without a word and the row in the
URL changed anyway, with 200: an admin's script that PATCHed rita's membership with {"user": "otto", "team": "beta",
"role": "lead"} (a wrong id from a stale listing) made rita a lead of alpha; a PUT of alpha's quota naming beta set
alpha's quota; a reservation "resized" to 8 GPUs answered 200 and stayed at 4. The OpenAPI schema listed a
membership's `team` and `user` as writable in a PATCH. The same values as stored are accepted, so a GET body PUT back
with only the changeable field edited works."""

from drf_spectacular.generators import SchemaGenerator

from portal.models import Membership


def test_a_membership_patch_naming_another_person_and_team_is_refused(api, world, platform_admin, researcher):
    membership = Membership.objects.get(user=researcher, team__slug="alpha")
    response = api(platform_admin).patch(
        f"/api/v1/memberships/{membership.pk}/", {"team": "beta", "user": "otto", "role": "lead"}, format="json"
    )
    membership.refresh_from_db()
    assert membership.role == "researcher", "rita became a lead of alpha through a body that named otto and beta"
    assert response.status_code == 400
    assert {"team", "user"} <= set(response.json())
    assert "only its role can change" in response.json()["user"][0]


def test_a_membership_get_body_put_back_with_another_role_changes_the_role(api, world, platform_admin, researcher):
    """Positive control: the stored team and user are accepted, and the role changes."""
    client = api(platform_admin)
    membership = Membership.objects.get(user=researcher, team__slug="alpha")
    body = client.get(f"/api/v1/memberships/{membership.pk}/").json()

    response = client.put(f"/api/v1/memberships/{membership.pk}/", {**body, "role": "lead"}, format="json")

    assert response.status_code == 200, response.content
    membership.refresh_from_db()
    assert membership.role == "lead"


def test_a_quota_put_naming_another_team_is_refused(api, world, platform_admin):
    alpha = world["quotas"]["alpha"]
    response = api(platform_admin).put(
        f"/api/v1/quotas/{alpha.pk}/", {"team": "beta", "pool": "train", "max_gpus": 5}, format="json"
    )
    alpha.refresh_from_db()
    assert alpha.max_gpus == 8, "alpha's quota was changed by a body meant for beta"
    assert response.status_code == 400
    assert set(response.json()) == {"team"}


def test_a_quota_naming_an_unknown_pool_is_refused_as_another_pool(api, world, platform_admin):
    alpha = world["quotas"]["alpha"]
    response = api(platform_admin).patch(f"/api/v1/quotas/{alpha.pk}/", {"pool": "nope", "max_gpus": 5}, format="json")
    assert response.status_code == 400
    assert "only max_gpus can be changed" in response.json()["pool"][0]


def test_a_quota_get_body_put_back_with_other_gpus_changes_them(api, world, platform_admin):
    """Positive control: a GET body with only max_gpus edited is accepted."""
    client = api(platform_admin)
    alpha = world["quotas"]["alpha"]
    body = client.get(f"/api/v1/quotas/{alpha.pk}/").json()

    response = client.put(f"/api/v1/quotas/{alpha.pk}/", {**body, "max_gpus": 10}, format="json")

    assert response.status_code == 200, response.content
    alpha.refresh_from_db()
    assert alpha.max_gpus == 10


def test_a_reservation_patch_of_its_gpus_is_refused_not_ignored(api, world, platform_admin):
    reservation = world["reservations"]["alpha"]
    body = {"gpus": 8, "ends_at": reservation.ends_at.isoformat()}
    response = api(platform_admin).patch(f"/api/v1/reservations/{reservation.pk}/", body, format="json")
    assert response.status_code == 400, f"answered {response.status_code}, gpus still {response.json().get('gpus')}"
    assert "only ends_at can be changed" in response.json()["gpus"][0]


def test_a_reservation_patch_of_its_lending_points_to_the_lending_action(api, world, platform_admin):
    reservation = world["reservations"]["alpha"]
    response = api(platform_admin).patch(
        f"/api/v1/reservations/{reservation.pk}/", {"lending": "none", "ends_at": reservation.ends_at.isoformat()}
    )
    assert response.status_code == 400
    assert "/lending/" in response.json()["lending"][0]


def test_a_reservation_get_body_sent_back_with_a_new_end_moves_the_end(api, world, platform_admin):
    """Positive control: every stored value as a GET answered it is accepted, a price written as 3.5 for 3.50 too."""
    client = api(platform_admin)
    reservation = world["reservations"]["alpha"]
    body = client.get(f"/api/v1/reservations/{reservation.pk}/").json()
    new_end = reservation.ends_at - (reservation.ends_at - reservation.starts_at) / 2
    price = body["monthly_price_per_gpu"]

    response = client.patch(
        f"/api/v1/reservations/{reservation.pk}/",
        {**body, "monthly_price_per_gpu": float(price), "ends_at": new_end.isoformat()},
        format="json",
    )

    assert response.status_code == 200, response.content
    reservation.refresh_from_db()
    assert reservation.ends_at == new_end


def test_the_schema_does_not_offer_a_memberships_team_or_user_as_changeable():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = schema["paths"]["/api/v1/memberships/{id}/"]
    for method in ("put", "patch"):
        reference = operations[method]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        body = schema["components"]["schemas"][reference.rsplit("/", 1)[1]]["properties"]
        assert body["team"].get("readOnly") and body["user"].get("readOnly"), method
        assert not body["role"].get("readOnly"), method
