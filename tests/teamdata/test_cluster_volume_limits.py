"""Team volumes within the limits an admin sets, on the real local cluster (issue 24): a claim the portal creates in
a class without a provisioner binds only a volume assigned to its team, never an unassigned one or another team's;
the namespace's ResourceQuota caps the claims made around the portal (size, count, and classes closed to team
volumes); concurrent registrations of the same volume, or past a cap, answer one success and field errors, never a
500 (threads against the real PostgreSQL)."""

import threading
import time
import uuid

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from rest_framework.test import APIClient

from cluster import client
from pools import services as pool_services
from portal.choices import Role
from reconcile import namespaces
from teamdata import services
from teamdata.models import TeamVolume
from tests.clusterkit import wait_for
from tests.factories import MembershipFactory, UserFactory
from tests.teamdata.test_cluster_team_data import make_volume

pytestmark = [pytest.mark.cluster, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def team_lead(cluster_team):
    user = UserFactory(username=f"{cluster_team.slug}-lead")
    MembershipFactory(team=cluster_team, user=user, role=Role.LEAD)
    return user


def claim(namespace: str, name: str):
    return client.core().read_namespaced_persistent_volume_claim(name, namespace)


def test_a_new_claim_binds_only_a_volume_assigned_to_its_team(portal_cluster, cluster_team, team_lead, storage_class):
    unassigned = make_volume(storage_class, "5Gi", name=f"{storage_class}-free")
    theirs = make_volume(storage_class, "5Gi", team="someone-else", name=f"{storage_class}-theirs")
    services.register_volume(
        team=cluster_team, user=team_lead, name="data", source="created", size_gib=1, storage_class=storage_class
    )
    made = claim(cluster_team.namespace, "data")
    assert made.spec.selector.match_labels == {"reservoir.io/team": cluster_team.slug}
    # The PV controller binds an Immediate claim within a second or two when a volume fits: these two fit, and
    # are left alone.
    time.sleep(5)
    assert claim(cluster_team.namespace, "data").status.phase == "Pending"
    core = client.core()
    assert {core.read_persistent_volume(name).status.phase for name in (unassigned, theirs)} == {"Available"}

    ours = make_volume(storage_class, "5Gi", team=cluster_team.slug, name=f"{storage_class}-ours")
    wait_for(lambda: claim(cluster_team.namespace, "data").status.phase == "Bound", timeout=60, what="the bind")
    assert claim(cluster_team.namespace, "data").spec.volume_name == ours


def test_the_namespace_quota_caps_claims_made_around_the_portal(portal_cluster, cluster_team, storage_class):
    storage = k8s.StorageV1Api(client.api_client())
    closed = f"rsv-closed-{uuid.uuid4().hex[:8]}"  # not on the tests' allowlist (local-data, rsv-test-*)
    storage.create_storage_class({"metadata": {"name": closed}, "provisioner": "kubernetes.io/no-provisioner"})
    try:
        pool_services.set_namespace_limits(team=cluster_team, max_volumes=2, max_volume_storage_gib=20)
        namespaces.reconcile(cluster_team)  # the class was made after the set's own reconcile
        hard = client.core().read_namespaced_resource_quota("reservoir-quota", cluster_team.namespace).spec.hard
        assert hard["requests.storage"] == "20Gi" and hard["persistentvolumeclaims"] == "2"
        assert hard["local-data.storageclass.storage.k8s.io/requests.storage"] == "20Gi"
        assert hard[f"{closed}.storageclass.storage.k8s.io/persistentvolumeclaims"] == "0"

        # Claims of this test's own class (allowed, and without volumes: nothing binds, no demo volume is taken).
        def around_the_portal(name, size, storage_class=storage_class):
            body = {
                "metadata": {"name": name},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": storage_class,
                    "resources": {"requests": {"storage": size}},
                },
            }
            return client.core().create_namespaced_persistent_volume_claim(cluster_team.namespace, body)

        for name, size, in_class in (("too-big", "21Gi", storage_class), ("closed", "1Gi", closed)):
            with pytest.raises(ApiException) as refused:
                around_the_portal(name, size, in_class)
            assert refused.value.status == 403 and "exceeded quota" in refused.value.body
        around_the_portal("one", "5Gi")
        around_the_portal("two", "5Gi")
        with pytest.raises(ApiException) as refused:
            around_the_portal("three", "1Gi")  # storage is left, but not a third claim
        assert refused.value.status == 403 and "persistentvolumeclaims" in refused.value.body
    finally:
        storage.delete_storage_class(closed)


def _in_threads(count: int, call) -> list:
    """Run `call(index)` in `count` threads released together; their results (or exceptions), in index order."""
    start, results = threading.Barrier(count), [None] * count

    def run(index):
        try:
            start.wait(timeout=30)
            results[index] = call(index)
        except Exception as error:  # noqa: BLE001 - the test looks at what each thread met
            results[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def test_concurrent_registrations_of_one_volume_answer_one_success_and_field_errors(
    portal_cluster, cluster_team, team_lead
):
    url = reverse("teamdata:volume_create", args=[cluster_team.slug])
    for round_number in range(3):
        name = f"shared-{round_number}"
        body = {"team": cluster_team.slug, "name": name, "source": "existing"}

        def by_api(_index, body=body):
            api = APIClient(raise_request_exception=False)
            api.force_login(team_lead)
            response = api.post("/api/v1/volumes/", body, format="json")
            is_json = response.get("Content-Type", "").startswith("application/json")
            return response.status_code, response.json() if is_json else response.content[:200]

        answers = _in_threads(5, by_api)
        assert sorted(status for status, _ in answers) == [201, 400, 400, 400, 400], answers
        for status, answer in answers:
            if status == 400:
                assert answer == {"name": [f"{cluster_team.name} already has a volume named {name}."]}

        def by_form(_index, name=f"form-{round_number}"):
            web = Client(raise_request_exception=False)
            web.force_login(team_lead)
            response = web.post(url, {"name": name, "source": "existing"})
            return response.status_code, response.content.decode()

        answers = _in_threads(5, by_form)
        assert sorted(status for status, _ in answers) == [302, 400, 400, 400, 400], answers
        assert all("already has a volume named" in page for status, page in answers if status == 400)
    assert TeamVolume.objects.filter(team=cluster_team).count() == 6


def test_concurrent_registrations_never_pass_a_cap_together(portal_cluster, cluster_team, team_lead):
    pool_services.set_namespace_limits(team=cluster_team, max_volumes=2, max_volume_storage_gib=30)

    def register(index):
        return services.register_volume(
            team=cluster_team,
            user=team_lead,
            name=f"v{index}",
            source="created",
            size_gib=10,
            storage_class="local-data",
        )

    results = _in_threads(5, register)
    made = [result for result in results if isinstance(result, TeamVolume)]
    refused = [result for result in results if not isinstance(result, TeamVolume)]
    assert len(made) == 2 and len(refused) == 3
    assert all(list(error.message_dict) == ["name"] for error in refused), refused
