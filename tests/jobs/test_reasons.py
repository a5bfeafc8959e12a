"""The scheduler's and Kueue's words, as a user reads them: whole sentences in English and Chinese, never a raw
tail such as "… 5 Preemption is not helpful for scheduling."; a message of an unknown shape is kept verbatim on a
line of its own. The messages below were read from the local control plane (Kubernetes 1.36 scheduler, Kueue
0.17) by the cluster test at the end of this file, which keeps checking that the live scheduler still words them
so."""

import uuid

import pytest
from django.utils import translation

from jobs.reasons import kueue_reason, plain_reason
from tests.clusterkit import wait_for
from tests.english import english_words

PREEMPTION_TAIL = (
    "no new claims to deallocate, preemption: 0/9 nodes are available: 9 Preemption is not helpful for scheduling."
)

SCHEDULER_SAID = {
    "too few free GPUs": (
        "0/9 nodes are available: 2 Insufficient nvidia.com/gpu, 7 node(s) had untolerated taint(s). "
        + PREEMPTION_TAIL,
        "No node can take it now (9 nodes checked): 2 nodes lack enough free GPUs; "
        "7 nodes are kept for other workloads (taint).",
    ),
    "too little CPU": (
        f"0/9 nodes are available: 2 Insufficient cpu, 7 node(s) had untolerated taint(s). {PREEMPTION_TAIL}",
        "No node can take it now (9 nodes checked): 2 nodes lack free CPU; "
        "7 nodes are kept for other workloads (taint).",
    ),
    "too little memory": (
        f"0/9 nodes are available: 2 Insufficient memory, 7 node(s) had untolerated taint(s). {PREEMPTION_TAIL}",
        "No node can take it now (9 nodes checked): 2 nodes lack free memory; "
        "7 nodes are kept for other workloads (taint).",
    ),
    "no toleration": (
        f"0/9 nodes are available: 9 node(s) had untolerated taint(s). {PREEMPTION_TAIL}",
        "No node can take it now (9 nodes checked): 9 nodes are kept for other workloads (taint).",
    ),
    "outside the job's pools": (
        "0/9 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 7 node(s) had untolerated "
        f"taint(s). {PREEMPTION_TAIL}",
        "No node can take it now (9 nodes checked): 2 nodes are outside the job's pools; "
        "7 nodes are kept for other workloads (taint).",
    ),
    "cordoned and anti-affinity": (
        "0/9 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match pod anti-affinity rules, 6 "
        "node(s) had untolerated taint(s). no new claims to deallocate, preemption: 0/9 nodes are available: 2 No "
        "preemption victims found for incoming pod, 7 Preemption is not helpful for scheduling.",
        "No node can take it now (9 nodes checked): 1 node is cordoned; 2 nodes already run a pod it must not share "
        "a node with; 6 nodes are kept for other workloads (taint).",
    ),
    "not ready (older wording)": (
        "0/1000 nodes are available: 980 Insufficient nvidia.com/gpu, 20 node(s) had untolerated taint "
        "{node.kubernetes.io/not-ready: }. preemption: 0/1000 nodes are available.",
        "No node can take it now (1000 nodes checked): 980 nodes lack enough free GPUs; 20 nodes are not ready.",
    ),
}


@pytest.mark.parametrize("form", SCHEDULER_SAID)
def test_each_known_scheduler_message_becomes_one_whole_sentence(form):
    message, sentence = SCHEDULER_SAID[form]
    assert plain_reason(message) == sentence
    assert "reemption" not in plain_reason(message)


def test_an_unknown_scheduler_message_is_shown_verbatim_as_what_the_cluster_says():
    missing_volume = '0/9 nodes are available: persistentvolumeclaim "nope" not found. not found'
    assert plain_reason(missing_volume) == f"The cluster says: {missing_volume}"


def test_a_known_message_with_an_unknown_cause_keeps_the_whole_message_on_its_own_line():
    message = "0/2 nodes are available: 1 node(s) had volume node affinity conflict, 1 Insufficient cpu."
    assert plain_reason(message) == (
        f"No node can take it now (2 nodes checked): 1 node lacks free CPU.\nThe cluster says: {message}"
    )


NOT_ITS_FLAVORS = (
    "couldn't assign flavors to pod set main: flavor elastic doesn't match node affinity, flavor inference doesn't "
    "match node affinity, flavor training doesn't match node affinity, "
)
KUEUE_SAID = {  # read from Kueue's Workloads by tests/jobs/test_kueue_admission.py (strict job, gang of three)
    "over the team's maximum": (
        NOT_ITS_FLAVORS + "insufficient quota for nvidia.com/gpu in flavor reserved-a800, previously considered "
        "podsets requests (0) + current podset request (3) > maximum capacity (2)",
        "It needs 3 GPUs in Reserved A800, more than the team may ever use there (2).",
    ),
    "waiting for quota": (
        NOT_ITS_FLAVORS + "insufficient unused quota for nvidia.com/gpu in flavor reserved-a800, 2 more needed",
        "Waiting for its team's quota in Reserved A800: 2 more GPUs needed than the team's reservation and what it "
        "may borrow leave free now.",
    ),
    "held by the budget": (  # the portal's own check (reconcile/budget.py), as the sync reads it off the Workload
        "budget for November reached: ¥1,234.50 of ¥1,000.00",
        # No amount: these words reach every member of the team; billing figures are for its leads.
        "Held by the team's budget: the variable spend of November has reached the team's cap. It starts when an "
        "admin raises the cap or lets it pass, or next month; the team's leads see the figures on its billing page.",
    ),
}


@pytest.mark.parametrize("form", KUEUE_SAID)
def test_each_known_kueue_message_becomes_whole_sentences(form):
    message, sentence = KUEUE_SAID[form]
    assert kueue_reason(message, {"reserved-a800": "Reserved A800"}) == sentence


@pytest.mark.parametrize("said", [*(m for m, _ in SCHEDULER_SAID.values()), *(m for m, _ in KUEUE_SAID.values())])
def test_the_known_messages_read_in_chinese_without_an_english_word(compiled_translations, said):
    with translation.override("zh-hans"):
        words = plain_reason(said) if "nodes are available" in said else kueue_reason(said, {"reserved-a800": "包月"})
    assert not english_words(words), words


def test_an_unknown_message_in_chinese_keeps_the_cluster_words_verbatim(compiled_translations):
    with translation.override("zh-hans"):
        assert (
            plain_reason("0/3 nodes are available: something new") == "集群反馈：0/3 nodes are available: something new"
        )


# --- the live scheduler still words each known cause as above ------------------------------------------------


def _pod(name, *, gpus=1, cpu="1", memory="1Gi", pool=None, tolerate=None):
    spec = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/reservoir/train:1",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": cpu, "memory": memory}},
            }
        ],
    }
    if pool:
        term = {"matchExpressions": [{"key": "node-role", "operator": "In", "values": [pool]}]}
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    if tolerate:
        spec["tolerations"] = [{"key": "workload", "operator": "Equal", "value": tolerate, "effect": "NoSchedule"}]
    return {"metadata": {"name": name}, "spec": spec}


@pytest.mark.cluster
def test_the_live_scheduler_says_each_cause_in_a_known_form(kube_cluster, kube_namespace):
    from kubernetes import client

    api_client = kube_cluster.api_client()
    core = client.CoreV1Api(api_client)
    pods = {
        "gpus": _pod("gpus", gpus=9, pool="training", tolerate="training"),
        "cpu": _pod("cpu", cpu="500", pool="training", tolerate="training"),
        "memory": _pod("memory", memory="5000Gi", pool="training", tolerate="training"),
        "taint": _pod("taint"),
        "affinity": _pod(f"affinity-{uuid.uuid4().hex[:4]}", pool="no-such-pool", tolerate="training"),
    }
    for manifest in pods.values():
        core.create_namespaced_pod(kube_namespace, manifest)

    def messages():
        said = {}
        for pod in core.list_namespaced_pod(kube_namespace).items:
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled" and condition.status == "False" and condition.message:
                    said[pod.metadata.name] = condition.message
        return said if len(said) == len(pods) else None

    said = wait_for(messages, what="the scheduler's verdict on every pod")
    api_client.close()
    expected = {
        "gpus": "nodes lack enough free GPUs",
        "cpu": "nodes lack free CPU",
        "memory": "nodes lack free memory",
        "taint": "nodes are kept for other workloads (taint)",
        "affinity": "nodes are outside the job's pools",
    }
    for key, manifest in pods.items():
        words = plain_reason(said[manifest["metadata"]["name"]])
        assert words.startswith("No node can take it now (") and words.endswith("."), said
        assert expected[key] in words and "\n" not in words and "reemption" not in words, said
