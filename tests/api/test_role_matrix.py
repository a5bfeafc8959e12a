"""Who may do what through the API: every role against every endpoint, by browser session and by API token.

Roles around team alpha: researcher and lead are members, the outsider leads another team (beta), the admin is a
platform admin. What is outside a caller's scope answers 404; what they see but their role may not change, 403."""

from datetime import timedelta

import pytest
from django.utils import timezone

from pools import services as pool_services
from teamdata.models import TeamSecret, TeamVolume
from tests.factories import PoolFactory

ANON, OUTSIDER, RESEARCHER, LEAD, ADMIN = "anonymous", "outsider", "researcher", "lead", "admin"
ROLES = [ANON, OUTSIDER, RESEARCHER, LEAD, ADMIN]


def everyone(status, anonymous=401):
    return {ANON: anonymous, OUTSIDER: status, RESEARCHER: status, LEAD: status, ADMIN: status}


def members(member_status, *, outsider=404, admin=None):
    return {
        ANON: 401,
        OUTSIDER: outsider,
        RESEARCHER: member_status,
        LEAD: member_status,
        ADMIN: admin or member_status,
    }


def admin_only_write(admin_status, *, outsider=403, member=403):
    return {ANON: 401, OUTSIDER: outsider, RESEARCHER: member, LEAD: member, ADMIN: admin_status}


def hidden_from_non_admins(admin_status):
    return {ANON: 401, OUTSIDER: 404, RESEARCHER: 404, LEAD: 404, ADMIN: admin_status}


def _alpha_job(w):
    return w["jobs"]["alpha"].pk


def _alpha_reservation(w):
    return w["reservations"]["alpha"].pk


def _alpha_quota(w):
    return w["quotas"]["alpha"].pk


def _alpha_quota_request(w):
    return w["quota_requests"]["alpha"].pk


# Quota requests are for a team's leads and the admins: researchers see none (404), leads may not decide (403).
LEADS_AND_ADMINS = {ANON: 401, OUTSIDER: 404, RESEARCHER: 404, LEAD: 200, ADMIN: 200}


SOON = timezone.now() + timedelta(days=60)

# (name, method, path(world), body(world), expected status per role)
MATRIX = [
    ("teams list", "get", lambda w: "/api/v1/teams/", None, everyone(200)),
    ("team read", "get", lambda w: "/api/v1/teams/alpha/", None, members(200)),
    (
        "team create",
        "post",
        lambda w: "/api/v1/teams/",
        lambda w: {"slug": "gamma", "name": "Gamma"},
        admin_only_write(201),
    ),
    (
        "team change",
        "patch",
        lambda w: "/api/v1/teams/alpha/",
        lambda w: {"description": "x"},
        admin_only_write(200, outsider=404),
    ),
    ("team delete", "delete", lambda w: "/api/v1/teams/alpha/", None, admin_only_write(400, outsider=404)),
    ("memberships list", "get", lambda w: "/api/v1/memberships/", None, everyone(200)),
    (
        "membership create",
        "post",
        lambda w: "/api/v1/memberships/",
        lambda w: {"team": "alpha", "user": "otto", "role": "researcher"},
        admin_only_write(201),
    ),
    ("pools list", "get", lambda w: "/api/v1/pools/", None, everyone(200)),
    ("pool read", "get", lambda w: "/api/v1/pools/train/", None, everyone(200)),
    ("pool occupancy", "get", lambda w: "/api/v1/pools/train/occupancy/", None, everyone(200)),
    ("all occupancy", "get", lambda w: "/api/v1/pools/occupancy/", None, everyone(200)),
    ("pool change", "patch", lambda w: "/api/v1/pools/train/", lambda w: {"max_nodes": 6}, admin_only_write(200)),
    (
        "pool create",
        "post",
        lambda w: "/api/v1/pools/",
        lambda w: {
            "slug": "spot",
            "name": "Spot",
            "kind": "elastic",
            "gpu_model": "L40S",
            "node_selector": {"tier": "spot"},
        },
        admin_only_write(201),
    ),
    ("nodes list", "get", lambda w: "/api/v1/nodes/", None, everyone(200)),
    ("node read", "get", lambda w: "/api/v1/nodes/gpu-a/", None, everyone(200)),
    ("reservations list", "get", lambda w: "/api/v1/reservations/", None, everyone(200)),
    ("reservation read", "get", lambda w: f"/api/v1/reservations/{_alpha_reservation(w)}/", None, members(200)),
    (
        "reservation create",
        "post",
        lambda w: "/api/v1/reservations/",
        lambda w: {
            "team": "alpha",
            "pool": "train",
            "gpus": 2,
            "starts_at": SOON,
            "ends_at": SOON + timedelta(days=30),
        },
        admin_only_write(201),
    ),
    (
        "reservation end",
        "patch",
        lambda w: f"/api/v1/reservations/{_alpha_reservation(w)}/",
        lambda w: {"ends_at": timezone.now() + timedelta(days=10)},
        admin_only_write(200, outsider=404),
    ),
    (
        "reservation lending",
        "post",
        lambda w: f"/api/v1/reservations/{_alpha_reservation(w)}/lending/",
        lambda w: {"lending": "protect", "protected_gpus": 1},
        {ANON: 401, OUTSIDER: 404, RESEARCHER: 403, LEAD: 200, ADMIN: 200},
    ),
    ("quotas list", "get", lambda w: "/api/v1/quotas/", None, everyone(200)),
    ("quota read", "get", lambda w: f"/api/v1/quotas/{_alpha_quota(w)}/", None, members(200)),
    (
        "quota set",
        "post",
        lambda w: "/api/v1/quotas/",
        lambda w: {"team": "alpha", "pool": "train", "max_gpus": 10},
        admin_only_write(200),
    ),
    (
        "quota change",
        "patch",
        lambda w: f"/api/v1/quotas/{_alpha_quota(w)}/",
        lambda w: {"max_gpus": 12},
        admin_only_write(200, outsider=404),
    ),
    ("limits list", "get", lambda w: "/api/v1/namespace-limits/", None, everyone(200)),
    ("limits read", "get", lambda w: "/api/v1/namespace-limits/alpha/", None, members(200)),
    (
        "limits change",
        "patch",
        lambda w: "/api/v1/namespace-limits/alpha/",
        lambda w: {"max_pods": 40},
        admin_only_write(200, outsider=404),
    ),
    ("quota requests list", "get", lambda w: "/api/v1/quota-requests/", None, everyone(200)),
    (
        "quota request read",
        "get",
        lambda w: f"/api/v1/quota-requests/{_alpha_quota_request(w)}/",
        None,
        LEADS_AND_ADMINS,
    ),
    (
        "quota request create",
        "post",
        lambda w: "/api/v1/quota-requests/",
        lambda w: {"team": "alpha", "pool": "train", "max_gpus": 12, "reason": "Fine-tuning sprint"},
        {ANON: 401, OUTSIDER: 400, RESEARCHER: 403, LEAD: 201, ADMIN: 201},
    ),
    (
        "quota request approve",
        "post",
        lambda w: f"/api/v1/quota-requests/{_alpha_quota_request(w)}/approve/",
        lambda w: {"note": "ok"},
        {**LEADS_AND_ADMINS, LEAD: 403},
    ),
    (
        "quota request reject",
        "post",
        lambda w: f"/api/v1/quota-requests/{_alpha_quota_request(w)}/reject/",
        lambda w: {"note": "no"},
        {**LEADS_AND_ADMINS, LEAD: 403},
    ),
    (
        "quota request withdraw",
        "post",
        lambda w: f"/api/v1/quota-requests/{_alpha_quota_request(w)}/withdraw/",
        None,
        {**LEADS_AND_ADMINS, ADMIN: 403},
    ),
    ("jobs list", "get", lambda w: "/api/v1/jobs/", None, everyone(200)),
    ("job read", "get", lambda w: f"/api/v1/jobs/{_alpha_job(w)}/", None, members(200)),
    (
        "job submit",
        "post",
        lambda w: "/api/v1/jobs/",
        lambda w: {
            "team": "alpha",
            "pool": "train",
            "name": "t1",
            "image": "registry.example.com/t/train:1",
            "gpus": 1,
        },
        # For the outsider team alpha does not exist: a field error on `team`, never a hint that it does.
        members(201, outsider=400),
    ),
    ("job cancel", "post", lambda w: f"/api/v1/jobs/{_alpha_job(w)}/cancel/", None, members(202)),
    (
        "job e-mails",
        "patch",
        lambda w: f"/api/v1/jobs/{_alpha_job(w)}/",
        lambda w: {"notify": ["end"]},
        # The mails go to the job's submitter (rita, the researcher): only she chooses them.
        {ANON: 401, OUTSIDER: 404, RESEARCHER: 200, LEAD: 403, ADMIN: 403},
    ),
    ("usage of alpha", "get", lambda w: "/api/v1/usage/alpha/", None, {**members(200), RESEARCHER: 404}),
    ("spend of alpha", "get", lambda w: "/api/v1/spend/alpha/", None, {**members(200), RESEARCHER: 404}),
    (
        "budget of alpha",
        "put",
        lambda w: "/api/v1/spend/alpha/budget/",
        lambda w: {"monthly_cap": "100000.00"},
        {**members(200), RESEARCHER: 404},
    ),
    (
        "budget lift",
        "post",
        lambda w: "/api/v1/budget-lifts/",
        lambda w: {"job": _alpha_job(w), "reason": "deadline"},
        hidden_from_non_admins(201),
    ),
    ("invoices list", "get", lambda w: "/api/v1/invoices/", None, everyone(200)),
    ("tokens list", "get", lambda w: "/api/v1/tokens/", None, hidden_from_non_admins(200)),
    (
        "token create",
        "post",
        lambda w: "/api/v1/tokens/",
        lambda w: {"user": "rita", "name": "ci"},
        hidden_from_non_admins(201),
    ),
    ("audit list", "get", lambda w: "/api/v1/audit/", None, hidden_from_non_admins(200)),
    ("volumes list", "get", lambda w: "/api/v1/volumes/", None, everyone(200)),
    ("volume read", "get", lambda w: f"/api/v1/volumes/{w['volumes']['alpha'].pk}/", None, members(200)),
    (
        "volume register",
        "post",
        lambda w: "/api/v1/volumes/",
        lambda w: {"team": "alpha", "name": "scratch", "source": "created", "size_gib": 10},
        # Leads and admins register; for the outsider team alpha does not exist (a field error on `team`).
        {ANON: 401, OUTSIDER: 400, RESEARCHER: 403, LEAD: 201, ADMIN: 201},
    ),
    (
        "volume read-only for researchers",
        "post",
        lambda w: f"/api/v1/volumes/{w['volumes']['alpha'].pk}/access/",
        lambda w: {"read_only_for_researchers": True},
        {ANON: 401, OUTSIDER: 404, RESEARCHER: 403, LEAD: 200, ADMIN: 200},
    ),
    (
        "volume remove",
        "delete",
        lambda w: f"/api/v1/volumes/{w['volumes']['alpha'].pk}/",
        None,
        {ANON: 401, OUTSIDER: 404, RESEARCHER: 403, LEAD: 204, ADMIN: 204},
    ),
    ("secrets list", "get", lambda w: "/api/v1/secrets/", None, everyone(200)),
    ("secret read", "get", lambda w: f"/api/v1/secrets/{w['secrets']['alpha'].pk}/", None, members(200)),
]


@pytest.fixture
def world(world, team, lead):
    """The API world, plus a pending quota request of alpha (asked by its lead) in a second pool."""
    infer = PoolFactory(slug="infer", name="Inference")
    world["quota_requests"] = {
        "alpha": pool_services.request_quota_change(team=team, pool=infer, max_gpus=4, reason="Serving", user=lead)
    }
    world["volumes"] = {"alpha": TeamVolume.objects.create(team=team, name="datasets", source="existing")}
    # A row only: writing its Secret needs the cluster (tests/teamdata/test_cluster_team_data.py).
    world["secrets"] = {"alpha": TeamSecret.objects.create(team=team, name="hf", kind="opaque", keys=["token"])}
    return world


@pytest.fixture
def caller(request, api, token_client, researcher, lead, outsider, platform_admin):
    role, auth = request.param
    users = {OUTSIDER: outsider, RESEARCHER: researcher, LEAD: lead, ADMIN: platform_admin}
    if role == ANON:
        return role, api(None)
    return role, (api(users[role]) if auth == "session" else token_client(users[role]))


@pytest.mark.parametrize(
    "caller",
    [(role, auth) for role in ROLES for auth in ("session", "token")],
    indirect=True,
    ids=lambda p: f"{p[0]}-{p[1]}",
)
@pytest.mark.parametrize(("name", "method", "path", "body", "expected"), MATRIX, ids=[row[0] for row in MATRIX])
def test_role_matrix(world, caller, name, method, path, body, expected):
    role, client = caller
    response = getattr(client, method)(path(world), body(world) if body else None, format="json")
    assert response.status_code == expected[role], (role, name, response.content[:300])
